"""The connection to libvirt, and a run's objects found and removed by their names and
metadata (``libvirt_xml``): what `python -m testbed clean` and a teardown use.
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from common import paths
from common.errors import ConfigError

from ..state import run_of
from .libvirt_xml import METADATA_NS, network_name, pool_name

log = logging.getLogger(__name__)


def _quiet_libvirt() -> None:
    """libvirt prints every error to stderr by default; ours are raised or logged."""
    import libvirt

    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)


def connect():
    """An open libvirt connection; ConfigError saying how to fix it otherwise."""
    try:
        import libvirt
    except ImportError as exc:
        raise ConfigError("libvirt-python is not installed: run `make vms`") from exc
    _quiet_libvirt()
    try:
        return libvirt.open(paths.libvirt_uri())
    except libvirt.libvirtError as exc:
        raise ConfigError(
            f"cannot connect to libvirt at {paths.libvirt_uri()} ({exc}); is libvirtd "
            f"running? `make vms` installs and starts it"
        ) from exc


def _owner(obj, kind: str) -> str | None:
    """The run that made ``obj`` (a domain, network or pool), else None: its name must
    follow the strict pattern, and a domain must also carry the run in its metadata, so
    an object someone else named ``tb-...`` is never taken for ours."""
    import libvirt

    run_id = run_of(obj.name())
    if run_id is None:
        return None
    if kind == "networks":
        return run_id if obj.name() == network_name(run_id) else None
    if kind == "pools":
        return run_id if obj.name() == pool_name(run_id) else None
    try:
        meta = obj.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, METADATA_NS)
    except libvirt.libvirtError:
        return None
    text = ET.fromstring(meta).text if meta else None
    return run_id if text == run_id else None


def _mine(obj, kind: str, run_id: str | None, skip: Sequence[str] = ()) -> bool:
    owner = _owner(obj, kind)
    return owner is not None and run_id in (None, owner) and owner not in skip


def leftovers(run_id: str | None = None) -> dict[str, list[str]]:
    """libvirt objects carrying the testbed prefix (of one run or of any): domains,
    networks, storage pools. Empty when libvirt is not installed or not running."""
    found: dict[str, list[str]] = {"domains": [], "networks": [], "pools": []}
    try:
        import libvirt
    except ImportError:
        return found
    try:
        conn = libvirt.open(paths.libvirt_uri())
    except libvirt.libvirtError:
        return found
    try:
        for kind, objects in (
            ("domains", conn.listAllDomains()),
            ("networks", conn.listAllNetworks()),
            ("pools", conn.listAllStoragePools()),
        ):
            found[kind] = sorted(o.name() for o in objects if _mine(o, kind, run_id))
        return found
    finally:
        conn.close()


def _delete_volumes(pool) -> None:
    for vol in pool.listAllVolumes():
        vol.delete(0)


def remove_run_objects(conn, run_id: str | None = None, skip: Sequence[str] = ()) -> list[str]:
    """Destroy (and undefine, if persistent) every prefixed domain, network and pool of
    run ``run_id`` (or of every run but those in ``skip``); returns their names.
    Domains go first (they use the pools' overlays and the networks)."""
    import libvirt

    _quiet_libvirt()
    removed = []
    for kind, objects, before_destroy in (
        ("domains", conn.listAllDomains(), None),
        ("pools", conn.listAllStoragePools(), _delete_volumes),
        ("networks", conn.listAllNetworks(), None),
    ):
        for obj in objects:
            if not _mine(obj, kind, run_id, skip):
                continue
            try:
                persistent = obj.isPersistent()
                if obj.isActive():
                    if before_destroy:
                        before_destroy(obj)
                    obj.destroy()  # a transient object is gone after this
                if persistent:
                    obj.undefine()
            except libvirt.libvirtError as exc:
                log.warning("%s: %s", obj.name(), exc)
            removed.append(obj.name())
    return removed


def clean_leftovers(run_id: str | None = None, skip: Sequence[str] = ()) -> list[str]:
    """remove_run_objects on a fresh connection; [] when libvirt is absent or down."""
    if not any(leftovers(run_id).values()):
        return []
    conn = connect()
    try:
        return remove_run_objects(conn, run_id, skip)
    finally:
        conn.close()
