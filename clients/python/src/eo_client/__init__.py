"""eo_client: the Python client of eo (effectively-once processing in PostgreSQL).

Every statement it sends names eo's functions with eo's schema, found in
pg_catalog.pg_extension, and the catalog's with pg_catalog: the session's
search_path and look-alike functions a database owner put elsewhere are
never used (see docs/python.md).
"""
from ._sql import forget
from .claims import (BUSY, CLAIMED, DEAD, DUPLICATE, AsyncClaim, Claim, KeyStatus, RecoveryPoint, aclaim,
                     astatus, claim, status)
from .errors import (BadKey, Busy, Dead, EoError, FingerprintMismatch, InvalidArgument, NotHeld, NotInstalled,
                     PermissionDenied, ReadOnly, Rejected, StaleToken, Transient, UndefinedObject, UnsafeSchema,
                     sqlstate_of)
from .inbox import Applied, apply, apply_batch, record_failure
from .lease import AsyncLease, Lease

__version__ = "0.4.0.dev0"

__all__ = [
    "claim", "aclaim", "status", "astatus", "Claim", "AsyncClaim", "KeyStatus", "RecoveryPoint",
    "CLAIMED", "DUPLICATE", "BUSY", "DEAD", "Lease", "AsyncLease", "apply", "apply_batch", "record_failure",
    "Applied", "forget", "sqlstate_of",
    "EoError", "InvalidArgument", "BadKey", "FingerprintMismatch", "PermissionDenied", "NotHeld", "StaleToken",
    "Transient", "ReadOnly", "UndefinedObject", "NotInstalled", "UnsafeSchema", "Rejected", "Busy", "Dead",
]
