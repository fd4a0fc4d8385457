"""Desktop UI panels (imgui-bundle + moderngl), each a small function of an explicit state."""
