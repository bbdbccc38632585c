import unittest

from torchreq import require_torch


@require_torch
class StateTest(unittest.TestCase):
    def setUp(self):
        import torch

        from ringside.elastic import State

        torch.manual_seed(0)
        self.torch = torch
        self.model = torch.nn.Linear(4, 2)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=0.1)
        self.state = State(self.model, self.opt, epoch=0, history=[])

    def train_step(self):
        x = self.torch.randn(8, 4)
        loss = self.model(x).pow(2).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()

    def test_restore_goes_back_to_the_last_commit(self):
        self.train_step()
        self.state.step, self.state.epoch = 1, 1
        self.state.history.append("one")
        self.state.commit()
        committed = self.state.checksum()
        exp_avg = self.opt.state_dict()["state"][0]["exp_avg"].clone()

        self.train_step()
        self.state.step, self.state.epoch = 2, 2
        self.state.history.append("two")
        self.assertNotEqual(self.state.checksum(), committed)

        self.state.restore()
        self.assertEqual(self.state.checksum(), committed)
        self.assertEqual((self.state.step, self.state.epoch, self.state.history), (1, 1, ["one"]))
        self.assertTrue(self.torch.equal(self.opt.state_dict()["state"][0]["exp_avg"], exp_avg))

    def test_the_commit_is_a_copy_training_does_not_change(self):
        self.state.commit()
        self.state.restore()
        self.train_step()  # updates the optimizer state in place
        self.train_step()
        self.state.restore()
        self.state.restore()
        self.assertEqual(self.state.committed_step, 0)
        self.assertFalse(self.opt.state_dict()["state"], "the optimizer state of the commit was updated in place")

    def test_checksum_tracks_the_parameters(self):
        a = self.state.checksum()
        self.assertEqual(a, self.state.checksum())
        with self.torch.no_grad():
            self.model.bias[0] += 1e-6
        self.assertNotEqual(a, self.state.checksum())

    def test_reserved_field_names_are_refused(self):
        from ringside.elastic import State

        with self.assertRaises(ValueError):
            State(self.model, self.opt, rank=3)

    def test_commit_without_run_does_not_check(self):
        self.state.commit()  # no sidecar: no GenerationChanged, no heartbeat
        self.state.check()


if __name__ == "__main__":
    unittest.main()
