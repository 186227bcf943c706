"""Bounded waits on a condition: the one place the tests pause between two looks."""

import time


def poll(condition, timeout, what=None, interval=0.05):
    """Call ``condition()`` until it returns something truthy and return that; after
    ``timeout`` seconds: TimeoutError naming ``what``, or None when ``what`` is None (the
    caller goes on either way, e.g. to a harder signal)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            if what is None:
                return None
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
