"""pip installs the package offline (setuptools from the system, no build isolation), typed."""
import os
import shutil
import subprocess
import sys


def test_pip_install(tmp_path):
    src = os.path.join(os.path.dirname(__file__), "..")
    copy = tmp_path / "src"
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "test"))
    target = tmp_path / "target"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "--target", str(target), str(copy)], check=True)
    assert (target / "eo_client" / "py.typed").exists()
    out = subprocess.run([sys.executable, "-c", "import eo_client, sys; print(eo_client.__file__)"],
                         env={**os.environ, "PYTHONPATH": str(target)}, cwd=str(tmp_path),
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith(str(target))
