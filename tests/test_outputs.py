"""What the commands write, read back: GIF delays and MP4 rates, opt-in float data (npy and EXR) that
matches the PNGs, AOV PNGs that say what range they encode, the loss plot's axes, permissions as
open() gives them, the fit re-run from its own fit.json, `run_fit` writing what the CLI writes,
and -v/-q."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from app.cli import main as cli_main
from engine import atomic, image_io, output_dir
from tests.test_misuse import gif_duration_ms

ROOT = Path(__file__).resolve().parents[1]
RENDER = [sys.executable, "-m", "app", "render", "--arch", "cpu", "--width", "64", "--height", "32"]


def _distinct_frames(n: int) -> list[np.ndarray]:
    return [np.full((33, 65, 3), 30 * i, np.uint8) for i in range(n)]


@pytest.mark.parametrize("fps, delay_ms", [(10, 100), (4, 250), (24, 40), (50, 20)])
def test_gif_delay_is_read_back_from_the_file(tmp_path, fps, delay_ms):
    image_io.write_gif(tmp_path / "a.gif", _distinct_frames(4), fps=fps)
    image = Image.open(tmp_path / "a.gif")
    assert image.n_frames == 4 and image.info["loop"] == 0
    assert image_io.gif_delay_ms(fps) == delay_ms and gif_duration_ms(tmp_path / "a.gif") == 4 * delay_ms


def test_mp4_rate_size_and_frames_are_read_back(tmp_path):
    import imageio.v2 as imageio

    frames = _distinct_frames(5)
    image_io.write_mp4(tmp_path / "a.mp4", frames, fps=12.5)
    reader = imageio.get_reader(tmp_path / "a.mp4")
    meta = reader.get_meta_data()
    assert meta["fps"] == pytest.approx(12.5) and meta["size"] == (66, 34)  # odd sizes padded to even
    decoded = [frame for frame in reader]
    assert len(decoded) == 5
    assert [int(np.median(frame[:33, :65])) for frame in decoded] == pytest.approx([30 * i for i in range(5)], abs=3)


@pytest.mark.parametrize("shape", [(6, 7), (6, 7, 3)])
def test_exr_round_trips_float32_exactly(tmp_path, shape):
    import OpenEXR

    data = np.random.default_rng(0).normal(size=shape).astype(np.float32) * 1e3
    image_io.write_float(tmp_path / "x.exr", data)
    channels = OpenEXR.File(str(tmp_path / "x.exr")).channels()
    np.testing.assert_array_equal(channels["RGB" if len(shape) == 3 else "Z"].pixels, data)


def test_files_get_the_permissions_open_gives_them(tmp_path):
    old = os.umask(0o027)
    try:
        atomic.write_bytes(tmp_path / "new.bin", b"x")
        (tmp_path / "kept.bin").write_bytes(b"old")
        os.chmod(tmp_path / "kept.bin", 0o604)
        atomic.write_bytes(tmp_path / "kept.bin", b"new")
    finally:
        os.umask(old)
    assert (tmp_path / "new.bin").stat().st_mode & 0o777 == 0o640  # 0666 less the umask, not mkstemp's 0600
    assert (tmp_path / "kept.bin").stat().st_mode & 0o777 == 0o604 and (tmp_path / "kept.bin").read_bytes() == b"new"


def test_a_frame_png_names_who_drew_it(tmp_path):
    """`render` writes the PNG text chunk `invert --compare auto` reads (engine.image_io, not the render command)."""
    pixels = np.zeros((2, 3, 3), np.uint8)
    for kind in image_io.EDGE_KINDS:
        image_io.write_png(tmp_path / f"{kind}.png", pixels, text=image_io.png_edges_text(kind))
        assert image_io.png_edges(tmp_path / f"{kind}.png") == kind
    image_io.write_png(tmp_path / "plain.png", pixels)
    assert image_io.png_edges(tmp_path / "plain.png") is None


def test_render_writes_floats_only_when_asked_and_labels_its_aovs(tmp_path):
    plain = subprocess.run([*RENDER, "--out", str(tmp_path / "plain")], capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    assert sorted(os.listdir(tmp_path / "plain")) == [".shannon-run.json", "frame.png", "render.json"]
    assert plain.stdout.strip().endswith(f"; wrote {tmp_path / 'plain'}/: frame.png, render.json"), plain.stdout
    full = subprocess.run([*RENDER, "--aov", "all", "--float", "npy", "--out", str(tmp_path / "full")],
                          capture_output=True, text=True, timeout=300)
    assert full.returncode == 0, full.stderr
    out = tmp_path / "full"
    listed = full.stdout.strip().split(f"; wrote {out}/: ")[1].split(", ")  # every file it wrote, named
    assert sorted(listed) == sorted(set(os.listdir(out)) - {".shannon-run.json"})
    frame, depth, normals = (np.load(out / f"{name}.npy") for name in ("frame", "depth", "normals"))
    assert frame.shape == (32, 64, 3) and depth.shape == (32, 64) and normals.shape == (32, 64, 3)
    assert frame.dtype == depth.dtype == normals.dtype == np.float32
    np.testing.assert_array_equal(np.asarray(Image.open(out / "frame.png")), image_io.srgb8(frame))
    record = json.loads((out / "render.json").read_text())
    assert record["arch"] == "cpu" and record["interrupted"] is False
    assert image_io.png_edges(out / "frame.png") == "hard" == record["edges"]
    for name in ("depth.png", "normals.png", "steps.png"):
        assert Image.open(out / name).text["Description"] == record["aovs"][name]
    from engine.render import MAX_DEPTH

    near, far = image_io.depth_range(depth, MAX_DEPTH)
    assert f"nearest hit {near:.4g} m" in record["aovs"]["depth.png"] and f"farthest hit {far:.4g} m" in \
        record["aovs"]["depth.png"]
    grey = np.asarray(Image.open(out / "depth.png"))[:32, :64, 0]  # the picture; its legend is under it
    assert grey[depth == depth[depth < MAX_DEPTH].min()].max() == 255  # the labelled nearest hit is white
    for name, legend in (("depth.png", image_io.depth_legend(depth, MAX_DEPTH)),
                         ("normals.png", image_io.normals_legend()), ("steps.png", image_io.steps_legend(160))):
        drawn = np.asarray(Image.open(out / name).convert("RGB"))
        assert drawn.shape == (32 + image_io.legend_height(64), image_io.LEGEND_MIN_WIDTH, 3)
        np.testing.assert_array_equal(drawn, image_io.with_legend(drawn[:32, :64], legend))


def _tick_labels(legend: image_io.Legend) -> list[float]:
    return [float(label) for _, label in legend.ticks]


def test_aov_legend_shows_the_colours_and_the_values_of_the_data():
    from engine.kernels.raymarch import MAX_STEPS

    depth = np.full((40, 400), 50.0)  # 50: escaped rays (the march's far limit here)
    depth[10:30, 20:380] = np.linspace(1.37, 8.9, 360)[None]
    picture = image_io.depth_image(depth, 50.0)
    legend = image_io.depth_legend(depth, 50.0)
    drawn = image_io.with_legend(picture, legend)
    assert drawn.shape == (40 + image_io.legend_height(400), 400, 3) == (40 + image_io.LEGEND_HEIGHT, 400, 3)
    np.testing.assert_array_equal(drawn[:40, :, 0], picture)  # the picture itself untouched
    values = _tick_labels(legend)
    assert values[:2] == [1.37, 8.9] and all(1.37 < v < 8.9 for v in values[2:])  # the data's ends, then round values
    top, bottom, left, right = image_io.legend_bar_box(400, legend)
    bar = drawn[40 + top:40 + bottom, left:right]
    assert (bar == bar[:1]).all()  # one colour per column
    for (position, label) in legend.ticks:  # the bar under each tick has the picture's grey for that depth
        column = min(int(left + position * (right - left)), right - 1)
        expected = picture[20, np.abs(depth[20] - float(label)).argmin()]  # the picture's pixel nearest that depth
        assert abs(int(bar[0, column - left, 0]) - int(expected)) <= 3, (label, bar[0, column - left], expected)
    assert bar[0, 0, 0] == 255 and bar[0, -1, 0] <= 40  # nearest white at the left, farthest dark grey at the right
    labels = drawn[40 + bottom + 4:, left:right]  # tick labels are drawn (light text on the dark strip)
    assert (labels.max(axis=-1) > 200).sum() > 20
    steps = image_io.steps_legend(MAX_STEPS)
    assert _tick_labels(steps)[0] == 0 and max(_tick_labels(steps)) <= MAX_STEPS
    top, bottom, left, right = image_io.legend_bar_box(400, steps)
    ramp = image_io.with_legend(np.zeros((4, 400), np.uint8), steps)[4 + top, left:right]
    ends = image_io.heatmap(np.array([0.0, MAX_STEPS]), 0, MAX_STEPS)  # the bar's pixel centres are half a pixel in
    assert np.abs(ramp[[0, -1]].astype(int) - ends).max() <= 2
    def title_rows(image: np.ndarray, picture_height: int) -> int:  # rows of the strip's title with light text
        strip = image[picture_height:picture_height + image_io.legend_bar_box(image.shape[1], legend)[0]]
        return int((strip.max(axis=(1, 2)) > 200).sum())

    wide = image_io.with_legend(np.zeros((8, 2048), np.uint8), legend)  # render's default width: a bigger legend
    assert wide.shape == (8 + 2 * image_io.LEGEND_HEIGHT, 2048, 3)
    assert title_rows(wide, 8) >= 1.7 * title_rows(drawn, 40) > 0
    normals = image_io.normals_legend()
    assert [label for _, label in normals.swatches] == ["+x", "-x", "+y", "-y", "+z", "-z", "no hit"]
    assert normals.swatches[2][0] == tuple(image_io.normal_image(np.array([[0.0, 1.0, 0.0]]))[0])


def test_render_animation_gif_and_mp4_play_at_the_asked_rate(tmp_path):
    import imageio.v2 as imageio

    result = subprocess.run([*RENDER, "--frames", "3", "--fps", "10", "--out", str(tmp_path)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "frames").iterdir()) == ["frame_0000.png", "frame_0001.png",
                                                                      "frame_0002.png"]
    assert gif_duration_ms(tmp_path / "animation.gif") == 300
    assert result.stdout.strip().endswith("wrote " + f"{tmp_path}/: frames/ (3 PNGs), animation.gif, animation.mp4, "
                                          "render.json"), result.stdout
    reader = imageio.get_reader(tmp_path / "animation.mp4")
    assert reader.get_meta_data()["fps"] == pytest.approx(10) and reader.count_frames() == 3
    record = json.loads((tmp_path / "render.json").read_text())
    assert record["frames_done"] == 3 and record["gif_delay_ms"] == 100


def test_loss_plot_is_a_labelled_log_plot_in_png_and_svg(tmp_path):
    from app.plot import write_loss_plot

    paths = write_loss_plot(tmp_path / "loss", [1.0, 0.1, 0.01, 0.001], "a title", mark=(2, "interrupted"))
    assert [p.name for p in paths] == ["loss.png", "loss.svg"]
    assert Image.open(paths[0]).size == (800, 480)
    svg = paths[1].read_text()
    for words in ("iteration", "Chamfer loss", "mean squared distance", "a title", "interrupted at iteration 2",
                  "10^{-3}"):
        assert words in svg.replace("\\mathdefault", "").replace("$", ""), words


def test_fit_reruns_from_its_own_fit_json_and_run_fit_writes_what_the_cli_writes(ti_cpu, tmp_path):
    from app.scenes.fit_run import run_fit
    from app.scenes.fit_settings import FitSettings

    flags = ["--target", "torus", "--subdiv", "1", "--iters", "4", "--samples", "300", "--lr", "0.05", "--seed", "3",
             "--smooth", "0.2", "--dump-every", "2", "--arch", "cpu", "--mesh-format", "ply"]
    code = cli_main(["fit", *flags, "--out", str(tmp_path / "cli")])
    first = json.loads((tmp_path / "cli" / "fit.json").read_text())
    assert code == {"ok": 0, "diverged": 1}[first["status"]]
    assert cli_main(["fit", "--config", str(tmp_path / "cli" / "fit.json"), "--out", str(tmp_path / "again")]) == code
    result = run_fit(FitSettings.from_record(first), tmp_path / "api")
    again, api = (json.loads((tmp_path / name / "fit.json").read_text()) for name in ("again", "api"))
    for record in (again, api):  # bit for bit: the same settings, losses and files
        assert {k: v for k, v in record.items() if k != "wall_s"} == {k: v for k, v in first.items() if k != "wall_s"}
    assert (first["lr"], first["seed"], first["smooth"], first["smooth_end"]) == (0.05, 3, 0.2, 0.2)
    for name in first["files"][:-1]:  # fit.json itself holds the wall time
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
    assert result.record == api and result.exit_code == code and all(path.is_file() for path in result.files)


def test_config_flags_override_the_saved_settings(tmp_path):
    from app.cli import _parser
    from app.scenes.fit_cli import settings_from

    saved = {"target": "spot", "subdiv": 4, "iterations": 300, "lr": 0.01, "smooth": 0.5, "smooth_end": 0.2,
             "samples": 9000, "seed": 7, "dump_every": 0, "mesh_format": "obj", "video": False,
             "backend": {"arch": "cpu", "requested": "cpu"}}
    (tmp_path / "fit.json").write_text(json.dumps(saved))

    def settings(*flags: str):
        return settings_from(_parser().parse_args(["fit", "--config", str(tmp_path / "fit.json"), *flags]))

    assert settings() == settings("--lr", "0.01")  # a flag equal to the saved value changes nothing
    assert (settings().lr, settings().arch, settings().samples, settings().smooth_end) == (0.01, "cpu", 9000, 0.2)
    assert settings("--iters", "5", "--arch", "vulkan").iterations == 5 and settings("--arch", "vulkan").arch == "vulkan"
    assert (settings("--smooth", "0.3").smooth, settings("--smooth", "0.3").smooth_end) == (0.3, None)  # constant
    assert (settings("--smooth-end", "0.0").smooth, settings("--smooth-end", "0.0").smooth_end) == (0.5, 0.0)


def test_run_fit_safely_turns_failures_into_rows(tmp_path):
    from app.scenes.fit_run import run_fit_safely
    from app.scenes.fit_settings import FitSettings

    failed = run_fit_safely(FitSettings("nosuch.obj"), tmp_path / "bad")
    assert (failed.status, failed.exit_code) == ("error", 2) and "not found" in failed.message
    assert run_fit_safely(FitSettings("blob", lr=-1.0), tmp_path / "bad").record["error"].startswith("--lr must be")


def test_verbosity_flags_steer_the_log(tmp_path):
    def run(*flags: str) -> str:
        folder = tmp_path / "out"
        folder.mkdir(exist_ok=True)
        with output_dir.claim(folder, "fit", ("fit.json",)):  # an earlier run's file (recorded as it is written),
            atomic.write_text(folder / "fit.json", "{}")        # cleared with an info line
        result = subprocess.run([sys.executable, "-m", "app", "fit", "--target", "blob", "--arch", "vulkan", *flags,
                                 "--out", str(folder)], capture_output=True, text=True, timeout=120, cwd=ROOT,
                                env={**os.environ, "VK_ICD_FILENAMES": "/nonexistent/icd.json"})
        assert result.returncode == 2
        return result.stderr

    default, quiet, verbose = run(), run("-q"), run("-v")
    assert "cleared 1 file(s) an earlier run left in" in default and "debug:" not in default
    assert "cleared" not in quiet and quiet.splitlines()[-1].startswith("error: backend vulkan is not available")
    assert "debug: " in verbose and "is locked for this run" in verbose


def test_fit_video_frames_show_the_target_as_a_ghost_under_a_caption(tmp_path):
    import imageio.v2 as imageio

    from app.mesh_preview import GHOST_EDGE, GHOST_FILL
    from app.scenes.fit_run import VIDEO_SIZE, video_caption

    result = subprocess.run([sys.executable, "-m", "app", "fit", "--target", "spot", "--subdiv", "1", "--iters", "3",
                             "--video", "--arch", "cpu", "-q", "--out", str(tmp_path)], capture_output=True, text=True,
                            timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    frames = [frame for frame in imageio.get_reader(tmp_path / "progress.mp4")]  # list() asks its length: inf
    assert len(frames) == 3 and frames[0].shape == (VIDEO_SIZE + 14, VIDEO_SIZE, 3)  # a 14-row caption strip on top

    def blue(frame: np.ndarray) -> int:  # the ghost's pixels: the mesh is orange (red > blue), the background white
        picture = frame[14:].astype(int)
        return int((picture[..., 2] - picture[..., 0] > 30).sum())

    assert GHOST_FILL[2] - GHOST_FILL[0] > 30 and GHOST_EDGE[2] - GHOST_EDGE[0] > 30
    # subdiv 1 is a ball around the cow: its outline crosses the ball, and its feet stick out as pale ghost
    assert blue(frames[0]) > 400
    assert (frames[0][:14].max(axis=-1) > 200).sum() > 100  # the caption's light text on its dark strip
    losses = json.loads((tmp_path / "fit.json").read_text())["losses"]
    assert video_caption("spot", 2, losses).startswith(f"spot: iteration 2, loss {losses[2]:.3e}")
