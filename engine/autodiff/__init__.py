"""Reverse-mode machinery: gradcheck, and (with the tape issue) the tape and optimisers."""
