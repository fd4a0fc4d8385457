"""The desktop app's status colours, defined once (ImGui RGBA, 0..1): what failed, what is fine, what is under way, what
is off, what has no verdict yet."""
from imgui_bundle import imgui

ERROR = imgui.ImVec4(1.0, 0.45, 0.35, 1.0)  # a failure, an error count, a check outside its threshold
OK = imgui.ImVec4(0.4, 0.9, 0.4, 1.0)  # a check within its threshold, an idle worker
BUSY = imgui.ImVec4(1.0, 0.8, 0.3, 1.0)  # starting, compiling, busy
WARNING = imgui.ImVec4(1.0, 0.62, 0.2, 1.0)  # a result that is not right, though nothing failed (not converged)
NEUTRAL = imgui.ImVec4(0.62, 0.62, 0.62, 1.0)  # no verdict yet (a run under way or paused)
