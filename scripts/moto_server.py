"""moto's standalone server, as `moto_server` starts it, less costs it pays that change nothing it
answers. Three on every request (measured: 35-45% of its CPU per small EC2 call, BENCHMARKS.md):
an access-log line on stderr per request, a listing of moto's package directory (one `isdir` per
service) to route each request, and a reflection over the response class's methods to dispatch
it. And one per EC2 resource it filters or answers with tags: the tags of one resource are found
by a scan of every tag in the region (half of its CPU under a fleet's teardowns, BENCHMARKS.md).
The tests and the demo start moto through this (scripts/moto-server).

INFRAFLOW_MOTO_CHECKED=1 (the tests' strict pass): each tag read also runs moto's own scan and
fails the request if the two differ."""

import functools
import os
import sys

import moto.backends as backends
import moto.core.responses as responses
import moto.ec2.models.tags as ec2_tags
import werkzeug.serving as serving

# The modules on disk do not change while the server runs.
_MODULES = tuple(backends.list_of_moto_modules())
backends.list_of_moto_modules = lambda: _MODULES
# Nor do a response class's methods.
responses.method_names_from_class = functools.lru_cache(maxsize=None)(responses.method_names_from_class)
# No access log: the port line ("Running on http://...") is logged at start, not per request.
serving.WSGIRequestHandler.log_request = lambda self, code="-", size="-": None

# One resource's tags, by id: what moto's scan of every tag answers for a filter on that one id
# (its id filter is an anchored glob, so an id without glob characters matches itself alone), in
# the order the scan finds them (the resource's tags as they were added). Any other filter is
# moto's own.
_scan_tags = ec2_tags.TagBackend.describe_tags
_GLOB = frozenset("*?[]")
_CHECKED = os.environ.get("INFRAFLOW_MOTO_CHECKED") == "1"


def _describe_tags(self, filters=None):
    ids = (filters or {}).get("resource-id")
    if filters is None or len(filters) != 1 or not ids or len(ids) != 1 or _GLOB & set(ids[0]):
        return _scan_tags(self, filters)
    rid = ids[0]
    tags = self.tags.get(rid) or {}
    kind = ec2_tags.EC2_PREFIX_TO_RESOURCE.get(ec2_tags.get_prefix(rid), "") if tags else ""
    found = [{"resource_id": rid, "key": k, "value": v, "resource_type": kind} for k, v in tags.items()]
    if _CHECKED:
        scanned = _scan_tags(self, filters)
        if scanned != found:
            sys.stderr.write(f"moto_server.py: tags of {rid} by id {found!r} differ from the scan's {scanned!r}\n")
            raise AssertionError(f"the tag fast path differs from moto's scan for {rid}")
    return found


ec2_tags.TagBackend.describe_tags = _describe_tags

from moto.server import main  # noqa: E402

sys.exit(main())
