"""moto's standalone server, as `moto_server` starts it, less three costs it pays on every request
that change nothing it answers (measured: 35-45% of its CPU per small EC2 call, BENCHMARKS.md):
an access-log line on stderr per request, a listing of moto's package directory (one `isdir` per
service) to route each request, and a reflection over the response class's methods to dispatch
it. The tests and the demo start moto through this (scripts/moto-server)."""

import functools
import sys

import moto.backends as backends
import moto.core.responses as responses
import werkzeug.serving as serving

# The modules on disk do not change while the server runs.
_MODULES = tuple(backends.list_of_moto_modules())
backends.list_of_moto_modules = lambda: _MODULES
# Nor do a response class's methods.
responses.method_names_from_class = functools.lru_cache(maxsize=None)(responses.method_names_from_class)
# No access log: the port line ("Running on http://...") is logged at start, not per request.
serving.WSGIRequestHandler.log_request = lambda self, code="-", size="-": None

from moto.server import main  # noqa: E402

sys.exit(main())
