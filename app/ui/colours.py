"""The desktop app's status colours, defined once (ImGui RGBA, 0..1): what failed, what is fine, what is under way."""
from imgui_bundle import imgui

ERROR = imgui.ImVec4(1.0, 0.45, 0.35, 1.0)  # a failure, an error count, a check outside its threshold
OK = imgui.ImVec4(0.4, 0.9, 0.4, 1.0)  # a check within its threshold, an idle worker
BUSY = imgui.ImVec4(1.0, 0.8, 0.3, 1.0)  # starting, compiling, busy
