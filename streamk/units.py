"""Sizes in bytes as streamk says them to a person: binary units, as the README's limits are
given (``812 B``, ``20.0 MiB``, ``5.0 GiB``). The one formatter of a byte size: the CLI's
lines and the library's notes use it, the JSON gives the raw number of bytes."""

_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")

__all__ = ["byte_size"]


def byte_size(nbytes: float) -> str:
    """``nbytes`` in words: whole bytes under 1 KiB, else one decimal in the largest binary
    unit that keeps the number at least 1 (``1,536.0 PiB`` past the last)."""
    n = float(nbytes)
    if abs(n) < 1024:
        return f"{int(n):,} B"
    for unit in _UNITS:
        n /= 1024
        if abs(n) < 1024 or unit == _UNITS[-1]:
            return f"{n:,.1f} {unit}"
    raise AssertionError("unreachable")
