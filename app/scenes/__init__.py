"""Scenes: the ray-marched robot arm, the shape fit and their CLIs (host-side timelines and loops)."""
