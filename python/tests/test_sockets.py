"""The group's sockets are shut down by inode, from the watcher thread."""

import os
import socket
import unittest
from unittest import mock

from ringside import _sockets


class ReusedDescriptorTest(unittest.TestCase):
    def connection(self):
        """A connected TCP socket on loopback, and its accepted peer."""
        listener = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(listener.close)
        tcp = socket.create_connection(listener.getsockname())
        self.addCleanup(tcp.close)
        accepted, _ = listener.accept()
        self.addCleanup(accepted.close)
        return tcp, accepted

    def test_a_descriptor_number_given_to_another_socket_is_not_shut_down(self):
        # The watcher lists the group's sockets, then the training thread's
        # gloo closes one and a DataLoader connects to its worker on the
        # same number (the lowest free): the shutdown must spare that one.
        # In CI such a shutdown broke a DataLoader's fd passing (EOFError).
        tcp, _ = self.connection()
        stale = os.fstat(tcp.fileno()).st_ino
        listed = {stale: tcp.fileno()}  # what the watcher listed

        mine, peer = socket.socketpair()
        self.addCleanup(mine.close)
        self.addCleanup(peer.close)
        os.dup2(mine.fileno(), tcp.fileno())  # the number now holds the unix socket

        with mock.patch.object(_sockets, "fd_inodes", return_value=listed):
            self.assertEqual(_sockets.shutdown([stale]), 0)
        peer.sendall(b"x")
        self.assertEqual(mine.recv(1), b"x", "the unix socket was shut down")

    def test_the_groups_socket_is_shut_down(self):
        tcp, accepted = self.connection()
        self.assertEqual(_sockets.shutdown([os.fstat(tcp.fileno()).st_ino]), 1)
        self.assertEqual(accepted.recv(1), b"", "the peer did not see the shutdown")


if __name__ == "__main__":
    unittest.main()
