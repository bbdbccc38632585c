"""The wait in collectives that heartbeats report apart from compute."""

import time
import unittest

from ringside import _current


class WaitTest(unittest.TestCase):
    def setUp(self):
        _current.clear_group()
        self.addCleanup(_current.clear_group)

    def test_overlapping_collectives_count_once_and_a_take_resets(self):
        self.assertIsNone(_current.take_waited(), "a wait measured with no collective")
        t0 = time.monotonic()
        a = _current.collective_began()
        b = _current.collective_began()
        time.sleep(0.02)
        _current.collective_ended(a)
        time.sleep(0.02)
        _current.collective_ended(b)
        elapsed = time.monotonic() - t0
        waited = _current.take_waited()
        self.assertIsNotNone(waited)
        self.assertGreaterEqual(waited, 0.04)
        self.assertLessEqual(waited, elapsed, "overlapping collectives were counted twice")
        self.assertIsNone(_current.take_waited(), "the wait was reported twice")

    def test_a_collective_still_in_flight_is_no_wait_yet_and_a_new_group_drops_it(self):
        _current.collective_began()  # one that failed: never ended
        self.assertIsNone(_current.take_waited())
        _current.set_group(None)
        token = _current.collective_began()
        _current.collective_ended(token)
        waited = _current.take_waited()
        self.assertIsNotNone(waited)
        self.assertLess(waited, 0.5, "the failed collective of the old group still counted")


if __name__ == "__main__":
    unittest.main()
