"""A small full-screen program: enters the alternate screen (curses), draws, waits for q."""

import curses


def main(stdscr: "curses.window") -> None:
    stdscr.addstr(2, 4, "FULLSCREEN-APP press q")
    stdscr.refresh()
    while stdscr.getch() != ord("q"):
        pass


curses.wrapper(main)
