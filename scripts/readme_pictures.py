"""The README's pictures, made by the real program into docs/pictures/ (run by scripts/readme_pictures.sh).

Each picture is one `python -m app` command (COMMANDS: its arguments) run into a scratch folder, then cut
down to a small PNG:

    scene.png   `render`: the robot-arm scene at t = 0.5, as the forward ray marcher draws it
    app.png     the desktop app after 120 live frames, cpu against vulkan (1280x800, shrunk to 960x600)
    fit.png     `fit --target spot --video`: four frames of progress.mp4 (the mesh over the target's ghost)
    invert.png  `invert`: its first and last progress frames (target | current | difference, captioned)

Never edit them by hand: `bash scripts/readme_pictures.sh [NAME ...]` makes them again (all four: about
4 minutes on 2 cores with warm kernel caches; the app needs a display, which the shell script provides).
tests/test_readme.py checks that every picture the README shows is one of PICTURES and that each
command parses.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
PICTURES = ROOT / "docs" / "pictures"
APP_SIZE = (960, 600)  # the screenshot, shrunk: the README shows it at most this wide
FIT_FRAMES = 4  # progress frames shown side by side: the start, two between, the end
COMMANDS = {  # picture -> the app's arguments; OUT stands for its scratch folder
    "scene.png": ["render", "--arch", "cpu", "--width", "640", "--height", "320", "--out", "OUT"],
    "app.png": ["--arch", "cpu", "--parity-arch", "vulkan", "--frames", "120", "--screenshot", "OUT/app.png"],
    "fit.png": ["fit", "--target", "spot", "--subdiv", "3", "--iters", "150", "--video", "--arch", "cpu",
                "--out", "OUT"],
    "invert.png": ["invert", "--arch", "cpu", "--out", "OUT"],
}


def _run(argv: list[str], out: Path) -> None:
    command = [sys.executable, "-m", "app", *(arg.replace("OUT", str(out)) for arg in argv), "-q"]
    print("+ python -m app " + " ".join(command[3:]), flush=True)
    subprocess.run(command, cwd=ROOT, check=True)


def _save(name: str, image: Image.Image) -> None:
    """A palette PNG (256 colours, no dithering): a third of the RGB file's size, no visible change at this size."""
    path = PICTURES / name
    image.convert("RGB").quantize(256, dither=Image.Dither.NONE).save(path, optimize=True)
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KB)", flush=True)


def _scene(out: Path) -> Image.Image:
    return Image.open(out / "frame.png")


def _app(out: Path) -> Image.Image:
    return Image.open(out / "app.png").resize(APP_SIZE, Image.Resampling.LANCZOS)


def _fit(out: Path) -> Image.Image:
    import imageio.v2 as imageio

    frames = [frame for frame in imageio.get_reader(out / "progress.mp4")]  # list() asks its length: inf
    picks = np.linspace(0, len(frames) - 1, FIT_FRAMES).round().astype(int)
    return Image.fromarray(np.concatenate([frames[k] for k in picks], axis=1))


def _invert(out: Path) -> Image.Image:
    """The first progress frame (the perturbed start) above the last (the recovered pose)."""
    frames = sorted((out / "frames").glob("iter_*.png"))
    return Image.fromarray(np.concatenate([np.asarray(Image.open(frames[k]).convert("RGB")) for k in (0, -1)]))


CUT = {"scene.png": _scene, "app.png": _app, "fit.png": _fit, "invert.png": _invert}


def main(names: list[str]) -> int:
    unknown = [name for name in names if name not in COMMANDS]
    if unknown:
        print(f"error: unknown picture {', '.join(unknown)}: choose from {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    PICTURES.mkdir(parents=True, exist_ok=True)
    for name in names or list(COMMANDS):
        with tempfile.TemporaryDirectory(prefix="readme-pictures-") as scratch:
            _run(COMMANDS[name], Path(scratch))
            _save(name, CUT[name](Path(scratch)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
