"""ElasticSampler: exactly once per epoch through resizes and rollbacks,
first as a property of the layout (many simulated jobs), then with real
processes (test_live_features)."""

import random
import unittest
from unittest import mock

from torchreq import require_torch


@require_torch
class LayoutTest(unittest.TestCase):
    def test_rounds_never_pad_and_never_leave_a_rank_without_a_batch(self):
        from ringside.sampler import rounds, share

        for left in range(0, 60):
            for world in range(1, 7):
                for batch in range(1, 5):
                    r = rounds(left, world, batch)
                    self.assertEqual(sum(r), left)
                    for i, total in enumerate(r):
                        sizes = [share(total, world, k)[1] for k in range(world)]
                        self.assertEqual(sum(sizes), total)
                        self.assertLessEqual(max(sizes) - min(sizes), 1)
                        if left >= world:
                            self.assertGreater(min(sizes), 0, (left, world, batch, r))
                        offs = [share(total, world, k)[0] for k in range(world)]
                        self.assertEqual(offs, [sum(sizes[:k]) for k in range(world)])

    def test_exactly_once_through_simulated_resizes_and_rollbacks(self):
        from ringside import sampler as sampler_mod

        rnd = random.Random(1)
        for trial in range(300):
            n, batch = rnd.randint(1, 80), rnd.randint(1, 5)
            s = sampler_mod.ElasticSampler(n, seed=trial)
            committed = s.state_dict()
            trained = []  # (indices) in the committed history
            pending = []
            while s.remaining() > 0:
                world = rnd.randint(1, 6)
                with mock.patch.object(sampler_mod, "_world", lambda: (0, world)):
                    layouts = []
                    for rank in range(world):
                        with mock.patch.object(sampler_mod, "_world", lambda r=rank: (r, world)):
                            layouts.append(list(s.batches(batch)))
                    self.assertEqual(len({len(l) for l in layouts}), 1, "ranks would run different step counts")
                    for step in range(rnd.randint(1, len(layouts[0]))):
                        pending.append([i for l in layouts for i in l[step]])
                        s.record_batch(batch)
                        if rnd.random() < 0.6:  # commit
                            trained += pending
                            pending = []
                            committed = s.state_dict()
                # the generation ends: roll back to the commit
                pending = []
                s.load_state_dict(committed)
            flat = [i for b in trained for i in b]
            self.assertEqual(sorted(flat), list(range(n)), "trial %d: not exactly once" % trial)

    def test_exactly_once_with_global_batch_rounds_through_resizes(self):
        # A KeepGlobalBatch policy sets the rounds at each generation: every
        # step takes the next global_batch indices of the epoch's order,
        # whatever the world size; ranks differ by one index at most.
        from ringside import sampler as sampler_mod

        rnd = random.Random(2)
        for trial in range(200):
            n, glob = rnd.randint(1, 90), rnd.randint(6, 12)
            s = sampler_mod.ElasticSampler(n, seed=trial)
            order = list(s._order())
            committed, trained, pending = s.state_dict(), [], []
            while s.remaining() > 0:
                world = rnd.randint(1, 6)
                s.set_rounds(global_batch=glob)
                layouts = []
                for rank in range(world):
                    with mock.patch.object(sampler_mod, "_world", lambda r=rank: (r, world)):
                        layouts.append(list(s.batches()))
                self.assertEqual(len({len(l) for l in layouts}), 1, "ranks would run different step counts")
                with mock.patch.object(sampler_mod, "_world", lambda: (0, world)):
                    for step in range(rnd.randint(1, len(layouts[0]))):
                        got = [i for l in layouts for i in l[step]]
                        start = s.consumed
                        if s.remaining() >= 2 * glob:  # not the epoch's last (maybe merged) round
                            self.assertEqual(got, order[start:start + glob])
                        self.assertLessEqual(max(len(l[step]) for l in layouts) - min(len(l[step]) for l in layouts), 1)
                        pending.append(got)
                        s.record_batch()
                        if rnd.random() < 0.6:
                            trained += pending
                            pending = []
                            committed = s.state_dict()
                pending = []
                s.load_state_dict(committed)
            flat = [i for b in trained for i in b]
            self.assertEqual(sorted(flat), list(range(n)), "trial %d: not exactly once" % trial)

    def test_set_epoch_again_keeps_the_progress(self):
        from ringside.sampler import ElasticSampler

        s = ElasticSampler(10, shuffle=False)
        s.record_batch(3)
        s.set_epoch(0)
        self.assertEqual(s.consumed, 3)
        s.set_epoch(1)
        self.assertEqual((s.epoch, s.consumed), (1, 0))

    def test_epochs_are_different_permutations_the_same_everywhere(self):
        from ringside.sampler import ElasticSampler

        a, b = ElasticSampler(50, seed=3), ElasticSampler(50, seed=3)
        self.assertEqual(list(a), list(b))
        first = list(a)
        a.set_epoch(1)
        self.assertNotEqual(list(a), first)
        self.assertEqual(sorted(a), list(range(50)))


if __name__ == "__main__":
    unittest.main()
