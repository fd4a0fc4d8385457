"""The app's panels: each module's `draw(state, gfx)` draws one dockable window from the `AppState`."""
