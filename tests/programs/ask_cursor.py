"""Asks the terminal where the cursor is (ESC[6n) and waits for the reply, as TUIs do."""

import os
import sys
import termios
import tty

fd = sys.stdin.fileno()
old = termios.tcgetattr(fd)
tty.setraw(fd)
try:
    os.write(1, b"abc\x1b[6n")
    reply = b""
    while not reply.endswith(b"R"):
        reply += os.read(fd, 1)
finally:
    termios.tcsetattr(fd, termios.TCSADRAIN, old)
print("\nreply", reply[1:].decode())
