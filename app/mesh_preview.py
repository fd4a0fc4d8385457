"""A flat-shaded orthographic preview of triangle meshes: the fit's progress video and result write-ups.

A numpy z-buffer rasteriser on the host (one Python step per triangle: fine for the
fit's meshes, a few hundred ms at 20k triangles), good enough to see whether a fitted
mesh has the target's shape; the desktop app has its own GL views.

    image = render(vertices, faces, size=320)                 # PIL image, mesh centred and scaled to fit
    image = render(vertices, faces, size=320, extent=1.2)     # fixed frame: [-1.2, 1.2] around the origin
    row = side_by_side([(target_v, target_f), (fit_v, fit_f)], size=320, extent=1.2)   # one image, side by side
    ghost = Ghost(target_v, target_f, size=320, extent=1.2)   # the target, drawn once
    frame = ghost.under(render(fit_v, fit_f, size=320, extent=1.2))   # the mesh over the target's faint silhouette
"""
from __future__ import annotations

import numpy as np
from PIL import Image


def _rotation(yaw: float, pitch: float) -> np.ndarray:
    cy, sy, cp, sp = np.cos(yaw), np.sin(yaw), np.cos(pitch), np.sin(pitch)
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rx = np.array([[1, 0, 0], [0, cp, -sp], [0, sp, cp]])
    return rx @ ry


def render(vertices: np.ndarray, faces: np.ndarray, size: int = 320, yaw: float = 0.6, pitch: float = -0.35,
           colour=(200, 170, 120), extent: float | None = None) -> Image.Image:
    """Flat-shaded render, camera looking down -z after rotating the mesh by yaw then pitch (radians).

    vertices (V, 3) float, faces (F, 3) int. Without `extent` the mesh is centred and scaled to
    fill the image; with it the view is fixed at [-extent, extent] around the origin (frames of
    a video stay comparable)."""
    vertices = np.asarray(vertices, float)
    if not np.all(np.isfinite(vertices)):
        return Image.new("RGB", (size, size), "white")  # a diverged fit's NaN mesh: nothing to draw
    centre = (vertices.max(0) + vertices.min(0)) / 2 if extent is None else np.zeros(3)
    v = (vertices - centre) @ _rotation(yaw, pitch).T
    scale = 0.45 * size / np.abs(v[:, :2]).max() if extent is None else 0.5 * size / extent
    px = v[:, 0] * scale + size / 2
    py = -v[:, 1] * scale + size / 2
    depth = np.full((size, size), -np.inf)
    image = np.full((size, size, 3), 255.0)
    light = np.array([0.3, 0.5, 0.8]) / np.linalg.norm([0.3, 0.5, 0.8])
    a, b, c = (v[faces[:, k]] for k in range(3))
    normal = np.cross(b - a, c - a)
    normal /= np.maximum(np.linalg.norm(normal, axis=1, keepdims=True), 1e-12)
    shade = 0.25 + 0.75 * np.abs(normal @ light)
    ys, xs = np.mgrid[0:size, 0:size] + 0.5
    for f, (i, j, k) in enumerate(faces):
        x0, y0, x1, y1, x2, y2 = px[i], py[i], px[j], py[j], px[k], py[k]
        lo_x, hi_x = int(max(min(x0, x1, x2), 0)), int(min(max(x0, x1, x2) + 1, size))
        lo_y, hi_y = int(max(min(y0, y1, y2), 0)), int(min(max(y0, y1, y2) + 1, size))
        if lo_x >= hi_x or lo_y >= hi_y:
            continue
        X, Y = xs[lo_y:hi_y, lo_x:hi_x], ys[lo_y:hi_y, lo_x:hi_x]
        den = (y1 - y2) * (x0 - x2) + (x2 - x1) * (y0 - y2)
        if abs(den) < 1e-12:
            continue
        w0 = ((y1 - y2) * (X - x2) + (x2 - x1) * (Y - y2)) / den
        w1 = ((y2 - y0) * (X - x2) + (x0 - x2) * (Y - y2)) / den
        w2 = 1 - w0 - w1
        inside = (w0 >= 0) & (w1 >= 0) & (w2 >= 0)
        z = w0 * v[i, 2] + w1 * v[j, 2] + w2 * v[k, 2]
        region = depth[lo_y:hi_y, lo_x:hi_x]
        nearer = inside & (z > region)
        region[nearer] = z[nearer]
        image[lo_y:hi_y, lo_x:hi_x][nearer] = np.array(colour) * shade[f]
    return Image.fromarray(image.astype(np.uint8))


GHOST_FILL = np.array([205.0, 220.0, 245.0])  # the target's silhouette behind the mesh: a pale blue
GHOST_EDGE = np.array([60.0, 110.0, 200.0])  # its outline, drawn over the mesh too (where the mesh overshoots)


class Ghost:
    """A target mesh's silhouette, rendered once, to put behind each frame of a fit (the progress video).

    `under(frame)`: the frame (a `render` of the fitted mesh in the same view, white background) with the
    silhouette's fill where the frame shows background and its outline on top everywhere."""

    def __init__(self, vertices: np.ndarray, faces: np.ndarray, **view) -> None:
        covered = np.asarray(render(vertices, faces, **view)).min(axis=-1) < 255  # shaded pixels are never white
        # the outline: two pixels wide across the silhouette's border (one pixel did not survive the video's codec)
        self.fill, self.edge = covered, _grow(covered) & _grow(~covered)

    def under(self, frame: Image.Image) -> np.ndarray:
        """uint8 RGB (H, W, 3): `frame` with the ghost behind it and its outline over it."""
        pixels = np.asarray(frame).astype(np.float64)
        background = pixels.min(axis=-1) == 255
        pixels[self.fill & background] = GHOST_FILL
        pixels[self.edge] = GHOST_EDGE
        return pixels.astype(np.uint8)


def _grow(mask: np.ndarray) -> np.ndarray:
    """`mask` with every pixel next to one of its pixels (left, right, up, down) added."""
    grown = mask.copy()
    grown[1:] |= mask[:-1]
    grown[:-1] |= mask[1:]
    grown[:, 1:] |= mask[:, :-1]
    grown[:, :-1] |= mask[:, 1:]
    return grown


def side_by_side(meshes: list[tuple[np.ndarray, np.ndarray]], **kwargs) -> Image.Image:
    """Render each (vertices, faces) with `render(**kwargs)` and put the images in a row (examples/fit_sphere_to_mesh.py)."""
    images = [render(v, f, **kwargs) for v, f in meshes]
    row = Image.new("RGB", (sum(i.width for i in images), images[0].height), "white")
    x = 0
    for image in images:
        row.paste(image, (x, 0))
        x += image.width
    return row
