"""``trimtab.profiles.loader.use_profile_dirs``: a folder's profile replaces the bundled one of the same name
for the process (what the end-to-end test does with this machine's calibrated CPU), and ``()`` restores the
bundle."""
from __future__ import annotations

import yaml

from trimtab.profiles.loader import load_profiles, use_profile_dirs
from trimtab.profiles import data_dir


def test_override_replaces_the_bundled_profile_and_resets(tmp_path):
    src = data_dir() / "gpus" / "cpu-xeon-2c.yaml"
    data = yaml.safe_load(src.read_text())
    bundled = load_profiles().gpus["cpu-xeon-2c"].bf16_tflops.value
    data["bf16_tflops"]["value"] = bundled * 2
    (tmp_path / "gpus").mkdir()
    (tmp_path / "gpus" / "cpu-xeon-2c.yaml").write_text(yaml.safe_dump(data))
    try:
        use_profile_dirs((tmp_path,))
        assert load_profiles().gpus["cpu-xeon-2c"].bf16_tflops.value == bundled * 2
        assert "h100-sxm" in load_profiles().gpus  # the rest of the bundle stays
    finally:
        use_profile_dirs(())
    assert load_profiles().gpus["cpu-xeon-2c"].bf16_tflops.value == bundled
