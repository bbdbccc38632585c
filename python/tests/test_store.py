"""Rank 0's store: it binds the member's advertised address only and
serves only clients that hold the generation's store token."""

import datetime
import json
import socket
import struct
import time
import unittest

from torchreq import require_torch

TOKEN = "5f" * 32


@require_torch
class StoreAccessTest(unittest.TestCase):
    def serve(self, port, token=TOKEN, host="127.0.0.1"):
        from ringside import _store

        srv = _store.Server(host, port, token=token)
        self.addCleanup(srv.close)
        return srv

    def client(self, port, token=TOKEN):
        from ringside import _store

        c = _store.make_client("127.0.0.1", port, 5, token=token)
        self.addCleanup(c.close)
        return c

    def test_a_client_with_the_token_is_served(self):
        self.serve(29601)
        c = self.client(29601)
        c.connect(time.monotonic() + 5)
        c.set("k", b"v")
        self.assertEqual(c.get("k"), b"v")
        clone = c.clone()
        self.addCleanup(clone.close)
        self.assertEqual(clone.get("k"), b"v")

    def test_a_client_without_the_token_or_with_another_is_refused(self):
        from ringside._store import StoreError

        self.serve(29602)
        for token in (None, "00" * 32):
            with self.subTest(token=token), self.assertRaises(StoreError) as cm:
                c = self.client(29602, token=token)
                c.connect(time.monotonic() + 5)
                c.set("k", b"v")
            self.assertRegex(str(cm.exception), "token")

    def test_a_raw_request_without_the_handshake_reads_nothing(self):
        srv = self.serve(29603)
        good = self.client(29603)
        good.set("secret", b"42")
        s = socket.create_connection(("127.0.0.1", 29603), timeout=5)
        self.addCleanup(s.close)
        body = json.dumps({"op": "get", "k": "secret", "t": 0}).encode()
        s.sendall(struct.pack(">I", len(body)) + body)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        self.assertNotIn(b"NDI=", got, "the store served a client that never proved it holds the token")
        self.assertIn(b"refused", got)
        del srv

    def test_the_store_binds_the_advertised_address_only(self):
        from ringside._store import StoreError

        srv = self.serve(29604, host="127.0.0.3")
        self.assertEqual(srv._srv.socket.getsockname()[0], "127.0.0.3")
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", 29604), timeout=2).close()
        for wildcard in ("0.0.0.0", "::", ""):
            with self.assertRaises(StoreError):
                self.serve(29605, host=wildcard)

    def test_the_whole_store_api_through_torchs_prefix_store(self):
        import torch.distributed as dist

        self.serve(29606)
        c = self.client(29606)
        p = dist.PrefixStore("g1", c)
        p.set("a", b"1")
        self.assertEqual(p.add("n", 2), 2)
        self.assertEqual(p.compare_set("c", "", "x"), b"x")
        p.wait(["a", "n"], datetime.timedelta(seconds=1))
        self.assertGreaterEqual(p.num_keys(), 3)
        self.assertTrue(p.delete_key("a"))
        self.assertFalse(c.check(["g1/a"]))


if __name__ == "__main__":
    unittest.main()
