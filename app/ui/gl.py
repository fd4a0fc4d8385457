"""OpenGL for the panels (moderngl on hello_imgui's context): image textures and the 3D mesh view.

`Gfx` is created inside the running window (it needs the current GL context) and is
handed to the panels. `Gfx.image(key, image, version)` keeps one texture per key and
re-uploads only when the version changes. `Gfx.mesh_view(...)` renders the fitted
mesh (shaded) and the target (wireframe) into an offscreen framebuffer, orbit camera
built in the vertex shader, and returns it as a texture for `imgui.image`.

After drawing offscreen we bind the window's framebuffer again; Dear ImGui's OpenGL
renderer sets every other piece of state it needs itself.
"""
from __future__ import annotations

import ctypes
import math

import moderngl
import numpy as np
from imgui_bundle import imgui

_MESH_VS = """
#version 330
uniform vec3 orbit;      // yaw, pitch (radians), distance
uniform vec3 center;     // the point the camera orbits (panned by the user)
uniform float aspect;
uniform float fov_y;     // radians
in vec3 in_pos;
out vec3 v_world;
void main() {
    float cy = cos(orbit.x), sy = sin(orbit.x), cp = cos(orbit.y), sp = sin(orbit.y);
    vec3 offset = orbit.z * vec3(cp * sy, sp, cp * cy);
    vec3 eye = center + offset;
    vec3 fwd = normalize(-offset);
    vec3 right = normalize(cross(fwd, vec3(0.0, 1.0, 0.0)));
    vec3 up = cross(right, fwd);
    vec3 p = in_pos - eye;
    vec3 c = vec3(dot(p, right), dot(p, up), -dot(p, fwd));   // camera space, looking down -z
    float f = 1.0 / tan(0.5 * fov_y), near = 0.05, far = 50.0;
    gl_Position = vec4(c.x * f / aspect, c.y * f, (c.z * (far + near) + 2.0 * far * near) / (near - far), -c.z);
    v_world = in_pos;
}
"""
_SHADED_FS = """
#version 330
uniform vec3 orbit;
uniform vec4 color;
in vec3 v_world;
out vec4 frag;
void main() {
    vec3 n = normalize(cross(dFdx(v_world), dFdy(v_world)));   // flat shading from screen derivatives
    vec3 eye_dir = normalize(vec3(cos(orbit.y) * sin(orbit.x), sin(orbit.y), cos(orbit.y) * cos(orbit.x)));
    vec3 light = normalize(eye_dir + vec3(0.3, 0.6, 0.2));
    float diffuse = abs(dot(n, light));
    frag = vec4(color.rgb * (0.25 + 0.75 * diffuse), color.a);
}
"""
_FLAT_FS = """
#version 330
uniform vec4 color;
in vec3 v_world;
out vec4 frag;
void main() { frag = color; }
"""
MESH_FOV_Y = 0.75  # the mesh view's vertical field of view, radians
MESH_COLOR = (0.95, 0.62, 0.25, 1.0)  # the fitted mesh
TARGET_COLOR = (0.45, 0.75, 1.0, 0.35)  # the target's wireframe
BACKGROUND = (0.11, 0.12, 0.14, 1.0)
GL_SAMPLES = 0x80A9


def window_samples() -> int:
    """Samples per pixel of the current context's window framebuffer (0: not multisampled).

    moderngl has no generic glGet, so this asks libGL directly; the app checks it because
    a multisampled window costs llvmpipe two thirds of its frame rate.
    """
    samples = ctypes.c_int(-1)
    ctypes.CDLL("libGL.so.1").glGetIntegerv(GL_SAMPLES, ctypes.byref(samples))
    return samples.value


def texture_ref(texture: moderngl.Texture) -> imgui.ImTextureRef:
    return imgui.ImTextureRef(texture.glo)


class MeshView:
    """Offscreen render of a shaded mesh over a wireframe target (see module docstring)."""

    def __init__(self, ctx: moderngl.Context):
        self._ctx = ctx
        self._shaded = ctx.program(vertex_shader=_MESH_VS, fragment_shader=_SHADED_FS)
        self._flat = ctx.program(vertex_shader=_MESH_VS, fragment_shader=_FLAT_FS)
        self._fbo: moderngl.Framebuffer | None = None
        self._color: moderngl.Texture | None = None
        self._mesh: tuple | None = None  # (version, vao, vbo, faces array it was built for)
        self._target: tuple[int, moderngl.VertexArray] | None = None
        self._drawn: tuple | None = None  # what the framebuffer holds: redraw only when it changes

    def _framebuffer(self, size: tuple[int, int]) -> moderngl.Framebuffer:
        if self._fbo is None or self._color.size != size:
            if self._fbo is not None:
                self._fbo.release()
                self._color.release()
            self._color = self._ctx.texture(size, 4)
            depth = self._ctx.depth_renderbuffer(size)
            self._fbo = self._ctx.framebuffer(color_attachments=[self._color], depth_attachment=depth)
        return self._fbo

    def _vao(self, program, vertices: np.ndarray, indices: np.ndarray) -> tuple[moderngl.VertexArray, moderngl.Buffer]:
        vbo = self._ctx.buffer(np.ascontiguousarray(vertices, dtype="f4").tobytes())
        ibo = self._ctx.buffer(np.ascontiguousarray(indices, dtype="i4").tobytes())
        return self._ctx.vertex_array(program, [(vbo, "3f", "in_pos")], index_buffer=ibo), vbo

    def set_mesh(self, version: int, vertices: np.ndarray, faces: np.ndarray) -> None:
        """Upload the fitted mesh if `version` changed (only the vertices when the faces are the same)."""
        if self._mesh is not None and self._mesh[0] == version:
            return
        if self._mesh is not None and self._mesh[3] is faces:
            self._mesh[2].write(np.ascontiguousarray(vertices, dtype="f4").tobytes())
            self._mesh = (version, *self._mesh[1:])
            return
        vao, vbo = self._vao(self._shaded, vertices, faces)
        self._mesh = (version, vao, vbo, faces)

    def set_target(self, version: int, vertices: np.ndarray, faces: np.ndarray) -> None:
        """Upload the target as a line list of its triangle edges if `version` changed."""
        if self._target is not None and self._target[0] == version:
            return
        edges = np.concatenate([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
        edges = np.unique(np.sort(edges, axis=1), axis=0)  # each shared edge once
        vao, _ = self._vao(self._flat, vertices, edges)
        self._target = (version, vao)

    def render(self, size: tuple[int, int], yaw_deg: float, pitch_deg: float, distance: float,
               center: tuple[float, float, float] = (0.0, 0.0, 0.0)) -> imgui.ImTextureRef:
        """The view as a texture, orbiting `center`; drawn again only when the meshes, the camera or the
        size changed (llvmpipe rasterises on the CPU the UI shares with the backends)."""
        scene = (size, yaw_deg, pitch_deg, distance, tuple(center), self._mesh and self._mesh[0],
                 self._target and self._target[0])
        if scene == self._drawn:
            return texture_ref(self._color)
        self._drawn = scene
        fbo = self._framebuffer(size)
        fbo.use()
        fbo.clear(*BACKGROUND, depth=1.0)
        orbit = (math.radians(yaw_deg), math.radians(pitch_deg), distance)
        for program in (self._shaded, self._flat):
            program["orbit"].value = orbit
            program["center"].value = tuple(center)
            program["aspect"].value = size[0] / max(size[1], 1)
            program["fov_y"].value = MESH_FOV_Y
        self._ctx.enable(moderngl.DEPTH_TEST)
        if self._mesh is not None:
            self._shaded["color"].value = MESH_COLOR
            self._mesh[1].render(moderngl.TRIANGLES)
        if self._target is not None:
            self._ctx.enable(moderngl.BLEND)
            self._ctx.blend_func = moderngl.SRC_ALPHA, moderngl.ONE_MINUS_SRC_ALPHA
            self._ctx.disable(moderngl.DEPTH_TEST)  # the target shows through the mesh, faintly
            self._flat["color"].value = TARGET_COLOR
            self._target[1].render(moderngl.LINES)
        self._ctx.disable(moderngl.DEPTH_TEST | moderngl.BLEND)
        self._ctx.screen.use()
        return texture_ref(self._color)


class Gfx:
    """The GL resources of one window: textures by key and the mesh view."""

    def __init__(self):
        self.ctx = moderngl.create_context()  # wraps hello_imgui's current context
        self.window_samples = window_samples()
        self._textures: dict[str, tuple[int, moderngl.Texture]] = {}
        self.mesh_view = MeshView(self.ctx)

    def image(self, key: str, image: np.ndarray, version: int) -> imgui.ImTextureRef:
        """A texture holding `image` ((H, W, 3) uint8), uploaded again only when `version` changes."""
        held = self._textures.get(key)
        if held is None or held[0] != version:
            height, width = image.shape[:2]
            if held is not None and held[1].size == (width, height):
                held[1].write(np.ascontiguousarray(image).tobytes())
                texture = held[1]
            else:
                if held is not None:
                    held[1].release()
                texture = self.ctx.texture((width, height), 3, np.ascontiguousarray(image).tobytes())
                texture.filter = (moderngl.LINEAR, moderngl.LINEAR)
            self._textures[key] = (version, texture)
        return texture_ref(self._textures[key][1])
