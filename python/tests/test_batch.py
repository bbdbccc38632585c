"""Batch policies (ringside.batch): the plan of each world size, and the
learning rate and sampler rounds they put in force, alone and in a real
4 -> 3 -> 5 job (a drain, then two joins) for both policies."""

import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from ringside import batch  # noqa: E402
from resize import check_steps, plans, run_4_3_5, steps_by  # noqa: E402
from torchreq import require_torch  # noqa: E402


class PlanTest(unittest.TestCase):
    def test_keep_global_batch_shares_it_and_accumulates_past_the_micro_batch(self):
        p = batch.KeepGlobalBatch(60, micro_batch=8)
        cases = {  # world: (shares by rank, accumulation steps)
            4: ([15] * 4, 2),
            3: ([20] * 3, 3),
            5: ([12] * 5, 2),
            7: ([9, 9, 9, 9, 8, 8, 8], 2),
        }
        for world, (shares, accum) in cases.items():
            plans = [p.plan(r, world) for r in range(world)]
            self.assertEqual([x.batch_size for x in plans], shares, "world %d" % world)
            self.assertEqual({x.accum_steps for x in plans}, {accum}, "world %d" % world)
            self.assertEqual({(x.global_batch, x.lr_scale) for x in plans}, {(60, 1.0)})
            # The loss weights make DDP's average of the ranks' weighted means the global mean.
            self.assertAlmostEqual(sum(x.loss_weight(x.batch_size) for x in plans) / world, 1.0)

    def test_micro_batches_cut_a_rank_share_evenly(self):
        plan = batch.KeepGlobalBatch(60, micro_batch=8).plan(1, 3)
        parts = plan.micro_batches(list(range(20)))
        self.assertEqual([len(x) for x in parts], [7, 7, 6])
        self.assertEqual(sum(parts, []), list(range(20)))

    def test_keep_per_rank_batch_scales_the_lr_by_its_rule(self):
        cases = {
            "linear": {4: 1.0, 3: 0.75, 5: 1.25, 8: 2.0},
            "sqrt": {4: 1.0, 3: 0.75 ** 0.5, 5: 1.25 ** 0.5},
            "none": {4: 1.0, 3: 1.0, 5: 1.0},
        }
        for rule, want in cases.items():
            p = batch.KeepPerRankBatch(16, lr_scaling=rule)
            for world, scale in want.items():
                plan = p.plan(0, world)
                self.assertEqual((plan.global_batch, plan.batch_size, plan.accum_steps), (16 * world, 16, 1))
                self.assertAlmostEqual(plan.lr_scale, scale, msg="%s at world %d" % (rule, world))
        own = batch.KeepPerRankBatch(8, lr_scaling=lambda r: min(r, 1.5), base_world=2)
        self.assertEqual([own.plan(0, w).lr_scale for w in (1, 2, 3, 4)], [0.5, 1.0, 1.5, 1.5])

    def test_bad_policies_are_refused_naming_what_is_wrong(self):
        for make, words in [
            (lambda: batch.KeepGlobalBatch(0), "global_batch must be a positive integer"),
            (lambda: batch.KeepGlobalBatch(64, micro_batch=-1), "micro_batch must be a positive integer"),
            (lambda: batch.KeepPerRankBatch(16, lr_scaling="cubic"), "lr_scaling 'cubic' is not one of linear"),
            (lambda: batch.KeepPerRankBatch(16, lr_scaling=3), "must be a rule's name or a callable"),
            (lambda: batch.KeepGlobalBatch(4).plan(0, 5), "a world of 5 ranks cannot share a global batch of 4"),
            (lambda: batch.KeepPerRankBatch(4, lr_scaling=lambda r: -r).plan(0, 2), "gave -1.0"),
        ]:
            with self.assertRaises((ValueError, TypeError)) as cm:
                make()
            self.assertIn(words, str(cm.exception))


@require_torch
class ApplyTest(unittest.TestCase):
    def test_lr_and_scheduler_follow_the_factor_and_restore_with_the_commit(self):
        import torch

        from ringside import elastic

        m = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 ** s)
        sampler = elastic.ElasticSampler(100, shuffle=False)
        pol = batch.KeepPerRankBatch(4, lr_scaling="linear")
        state = elastic.State(m, opt, batch_policy=pol, sched=sched, sampler=sampler)
        state.rank, state.world_size = 0, 2
        state._enter_generation()  # the base world: 2
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.1)
        self.assertEqual((sampler.batch_size, sampler.global_batch), (4, None))
        state.commit(check=False)
        state.world_size = 4
        state._enter_generation()
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.2)
        opt.step()
        sched.step()  # the scheduler keeps the scaled base: 0.2 * 0.5
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.1)
        self.assertEqual(state.batch.global_batch, 16)
        # The generation broke before its first commit: LR, factor and
        # scheduler all go back together; the next world applies from there.
        state.restore()
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.1)
        self.assertEqual(pol.lr_scale, 1.0)
        state.world_size = 3
        state._enter_generation()
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.15)
        self.assertAlmostEqual(sched.base_lrs[0], 0.15)

    def test_a_skipped_step_keeps_this_generations_learning_rate(self):
        import torch

        from ringside import elastic

        m = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        pol = batch.KeepPerRankBatch(4, lr_scaling="linear")
        state = elastic.State(m, opt, batch_policy=pol)
        state.rank, state.world_size = 0, 2
        state._enter_generation()
        state.commit(check=False)
        state.world_size = 4  # a new generation, no commit in it yet
        state._enter_generation()
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.2)
        self.assertFalse(state.guard(torch.tensor(float("nan"))))  # rolled back to the commit of world 2
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.2)
        self.assertEqual((pol.lr_scale, state.batch.lr_scale), (2.0, 2.0))

    def test_keep_global_batch_sets_the_sampler_rounds(self):
        import torch

        from ringside import elastic

        m = torch.nn.Linear(2, 1)
        sampler = elastic.ElasticSampler(100, shuffle=False)
        state = elastic.State(m, torch.optim.SGD(m.parameters(), lr=0.1),
                              batch_policy=batch.KeepGlobalBatch(10), sampler=sampler)
        state.rank, state.world_size = 0, 3
        state._enter_generation()
        self.assertEqual(sampler.global_batch, 10)
        self.assertEqual(state.batch.batch_size, 4)
        self.assertIn("global batch 10", state.summary())


@require_torch
class ResizeTest(unittest.TestCase):
    """4 ranks, a drain (3), two joins (5) under KeepPerRankBatch: the plan
    and the LR of each generation, and the samples every committed step
    trained in all. (KeepGlobalBatch's 4 -> 3 -> 5 job is the sharded-state
    one in test_shards, which also compares its loss with an unresized
    run's.)"""

    def test_keep_per_rank_batch_with_linear_lr(self):
        lines = list(run_4_3_5(self, 29520, ["--policy", "perrank", "--batch", "16", "--lr-scaling", "linear"], 14).lines)
        got = plans(lines)
        want = {1: (4, 64, 0.1), 2: (3, 48, 0.075), 3: (5, 80, 0.125)}  # world, global batch, LR
        for gen, (world, glob, lr) in want.items():
            for r in range(world):
                d = got[(gen, r)]
                self.assertEqual((d["world"], d["global_batch"], d["batch_size"], d["accum_steps"]),
                                 (world, glob, 16, 1), "generation %d rank %d" % (gen, r))
                self.assertAlmostEqual(d["lr"], lr, msg="generation %d rank %d" % (gen, r))
        check_steps(self, lines, {1: 4, 2: 3, 3: 5}, {1: 64, 2: 48, 3: 80})
        for (gen, _), ds in steps_by(lines).items():
            for d in ds:
                self.assertAlmostEqual(d["lr"], want[gen][2])


if __name__ == "__main__":
    unittest.main()
