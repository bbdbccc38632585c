"""The optional integrations (ringside.hf, ringside.lightning) and what
can be checked of them without their libraries, which Debian does not
package: importing them costs nothing (no transformers, lightning or
torch), and using one without its library says what to install. Nothing
here stands in for transformers or lightning."""

import importlib
import os
import subprocess
import sys
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def importable(name):
    return importlib.util.find_spec(name) is not None


class ImportTest(unittest.TestCase):
    def test_importing_the_integrations_imports_nothing_heavy(self):
        code = ("import sys; import ringside.hf, ringside.lightning, ringside.batch; "
                "heavy = [m for m in ('torch', 'transformers', 'accelerate', 'lightning', 'pytorch_lightning') "
                "if m in sys.modules]; print(heavy)")
        out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
        self.assertEqual(out.stdout.strip(), "[]", out.stderr)

    def test_the_examples_compile(self):
        # They cannot run here (no transformers, lightning or horovod): at
        # least they are Python that compiles.
        import py_compile
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            for name in ("hf/train.py", "lightning/train.py", "horovod/train.py"):
                py_compile.compile(os.path.join(ROOT, "..", "examples", name), doraise=True,
                                   cfile=os.path.join(d, name.replace("/", "-") + "c"))

    @unittest.skipIf(importable("transformers"), "transformers is installed: the callback is built for real")
    def test_the_hf_callback_without_transformers_says_what_to_install(self):
        from ringside.hf import RingsideCallback

        with self.assertRaises(ImportError) as cm:
            RingsideCallback(object())
        self.assertIn("pip install transformers", str(cm.exception))

    @unittest.skipIf(importable("lightning") or importable("pytorch_lightning"), "lightning is installed")
    def test_the_lightning_plugins_without_lightning_say_what_to_install(self):
        from ringside.lightning import RingsideCallback, RingsideEnvironment

        for build in (RingsideEnvironment, lambda: RingsideCallback(object())):
            with self.assertRaises(ImportError) as cm:
                build()
            self.assertIn("pip install lightning", str(cm.exception))


if __name__ == "__main__":
    unittest.main()


@unittest.skipUnless(importable("torch"), "torch is not importable")
class AdoptTest(unittest.TestCase):
    """State.adopt, which both integrations call with the optimizer their
    framework built for the generation."""

    def test_a_later_generation_restores_the_adopted_optimizer_from_the_commit(self):
        import torch

        sys.path.insert(0, ROOT)
        from ringside import elastic

        m = torch.nn.Linear(3, 1)
        state = elastic.State(m)
        opt = torch.optim.Adam(m.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
        state.adopt(opt, lr_scheduler=sched)  # the first generation: committed with them
        m(torch.ones(2, 3)).sum().backward()
        opt.step()
        sched.step()
        state.step = 1
        state.commit(check=False)
        want = {k: v.clone() for k, v in opt.state_dict()["state"][0].items()}
        # The next generation's framework builds a fresh optimizer.
        opt2 = torch.optim.Adam(m.parameters(), lr=0.1)
        sched2 = torch.optim.lr_scheduler.StepLR(opt2, 1, gamma=0.5)
        state.adopt(opt2, lr_scheduler=sched2)
        got = opt2.state_dict()["state"][0]
        for k, v in want.items():
            self.assertTrue(torch.equal(got[k], v), k)
        self.assertAlmostEqual(opt2.param_groups[0]["lr"], 0.05)
        self.assertEqual(sched2.last_epoch, 1)
