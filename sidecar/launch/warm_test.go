package launch

import (
	"slices"
	"testing"
)

func TestPythonCommand(t *testing.T) {
	for _, c := range []struct {
		cmd            []string
		interp, target []string
	}{
		{[]string{"python3", "train.py", "-x"}, []string{"python3"}, []string{"train.py", "-x"}},
		{[]string{"/usr/bin/python3.11", "-u", "-W", "ignore", "train.py"}, []string{"/usr/bin/python3.11", "-u", "-W", "ignore"}, []string{"train.py"}},
		{[]string{"python", "-Bu", "-m", "pkg.train", "--lr", "1"}, []string{"python", "-Bu"}, []string{"-m", "pkg.train", "--lr", "1"}},
		{[]string{"python", "-c", "print(1)"}, nil, nil},
		{[]string{"python", "-m"}, nil, nil},
		{[]string{"python", "--version"}, nil, nil},
		{[]string{"python"}, nil, nil},
		{[]string{"torchrun", "train.py"}, nil, nil},
		{[]string{"sh", "-c", "python train.py"}, nil, nil},
	} {
		interp, target, ok := pythonCommand(c.cmd)
		if ok != (c.interp != nil) || !slices.Equal(interp, c.interp) || !slices.Equal(target, c.target) {
			t.Errorf("pythonCommand(%q) = %q, %q, %v; want %q, %q", c.cmd, interp, target, ok, c.interp, c.target)
		}
	}
}
