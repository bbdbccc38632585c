"""The trainer API's golden fixtures, shared with the Go side: the sidecar's
tests produce trainer/api/testdata from the real handlers, and these tests
serve and parse the very same files (never copies), so the two ends of the
contract cannot drift apart."""

import copy
import json
import os

FIXTURES = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "trainer", "api", "testdata"))


def raw(name):
    """The fixture's bytes, exactly as the sidecar sends them."""
    with open(os.path.join(FIXTURES, name), "rb") as f:
        return f.read()


def load(name):
    """A JSON fixture, decoded (a fresh copy on every call)."""
    return json.loads(raw(name))


def lines(name):
    """A JSON-lines fixture (the event stream), decoded."""
    return [json.loads(line) for line in raw(name).splitlines() if line.strip()]


def exchanges():
    """Every exchange: method, path, status, and its request and answer files."""
    return load("exchanges.json")


def rendezvous(state):
    """The golden rendezvous answer of a member in state."""
    return load("rendezvous_%s.json" % state)


def event(kind):
    """The golden event-stream line of type kind."""
    for e in lines("events.ndjson"):
        if e["type"] == kind:
            return copy.deepcopy(e)
    raise KeyError("events.ndjson has no %r event" % kind)


def status_of(answer):
    """The HTTP status the sidecar answers with the fixture answer."""
    for ex in exchanges():
        if ex.get("answer") == answer:
            return ex["status"]
    raise KeyError("exchanges.json does not name %s" % answer)
