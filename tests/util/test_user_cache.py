"""Where the user's cache lives (:mod:`dlrm_exp.util.user_cache`)."""

import os
import tempfile
from pathlib import Path

from dlrm_exp.util.user_cache import cache_path


def test_a_user_without_a_home_folder_caches_in_the_temp_dir(tmp_path, monkeypatch):
    """``Path.home()`` raises RuntimeError for a user without ``$HOME`` and a passwd entry (a
    container's arbitrary uid): the peak probe's cache then failed the run (review); the
    data checks' cache remembered nothing."""
    monkeypatch.delenv("DLRM_EXP_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_path("peak.json") == tmp_path / ".cache" / "dlrm_exp" / "peak.json"

    def no_home() -> Path:
        raise RuntimeError("Could not determine home directory.")

    monkeypatch.setattr(Path, "home", staticmethod(no_home))
    temp = Path(tempfile.gettempdir()) / f"dlrm_exp-cache-{os.getuid()}" / "peak.json"
    assert cache_path("peak.json") == temp
    monkeypatch.setenv("DLRM_EXP_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_path("peak.json") == tmp_path / "mine" / "peak.json"
