"""A testbed's owner: the live process that uses it, by a lock on its run directory
(``testbed.ownership.RunLock``). ``Owned`` is a part of ``Testbed``.
"""

from __future__ import annotations

from common.errors import RunInUseError

from . import ownership
from . import state as st


class Owned:
    """Claiming a run, and leaving it to nobody (a part of ``Testbed``)."""

    state: st.RunState | None
    _owner: ownership.RunLock | None

    def claim(self) -> None:
        """Become the owner of this (attached) testbed for as long as this object uses it.

        Raises RunInUseError naming the owner when another live process owns it.
        """
        assert self.state is not None
        if self._owner is not None and self._owner.held:
            return
        lock = ownership.RunLock(self.state.run_dir)
        if not lock.acquire(blocking=False, wait_s=2.0):
            holder = lock.holder() or {}
            raise RunInUseError(
                f"run {self.state.run_id} is in use by {ownership.describe_holder(holder)}; "
                f"stop that process (or wait for it) first"
            )
        self._owner = lock

    def detach(self) -> None:
        """Leave the testbed running, owned by nobody (what `python -m testbed up` does):
        later commands act on it without --run, and `clean` leaves it alone while healthy."""
        assert self.state is not None
        self.state.detached = True
        self.state.save()
        if self._owner is not None:
            self._owner.release()
            self._owner = None
