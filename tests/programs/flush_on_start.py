"""Draws its question before it reads keys, as Claude Code does: for a moment the terminal is
still in line mode, then the program switches to raw mode and flushes whatever was typed."""

import os
import sys
import termios
import time
import tty

fd = sys.stdin.fileno()
old = termios.tcgetattr(fd)
os.write(1, b"Continue? (press Tab)\r\n")
# Keep drawing while "starting up" (as a TUI repaints), in line mode, for about 1.5 s.
for _ in range(15):
    time.sleep(0.1)
    os.write(1, b".")
tty.setraw(fd, termios.TCSAFLUSH)  # the switch discards pending input, like a TUI's
termios.tcflush(fd, termios.TCIFLUSH)
os.write(1, b"\r\nready\r\n")
try:
    key = os.read(fd, 1)
    os.write(1, b"got " + repr(key).encode() + b"\r\n")
    time.sleep(1.0)  # stay a moment, so the sender sees the reaction on a live screen
finally:
    termios.tcsetattr(fd, termios.TCSADRAIN, old)
