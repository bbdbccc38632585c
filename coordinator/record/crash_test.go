package record

import (
	"strings"
	"testing"
)

func TestCrashCauseNamesTheErrorAndWhereTheScriptRaisedIt(t *testing.T) {
	tests := []struct {
		name  string
		crash Crash
		want  string
	}{
		{"a traceback through a library names the script's frame", Crash{Stderr: []string{
			"Traceback (most recent call last):",
			`  File "/work/train.py", line 31, in <module>`,
			"    snapshot = torch.load(path)",
			`  File "/usr/lib/python3/dist-packages/torch/serialization.py", line 795, in load`,
			"    return _legacy_load(opened_file, map_location, pickle_module, **pickle_load_args)",
			"EOFError: Ran out of input",
		}}, "EOFError: Ran out of input, at train.py:31: snapshot = torch.load(path)"},
		{"the innermost frame of the script's own", Crash{Stderr: []string{
			`  File "/home/me/train.py", line 90, in <module>`,
			"    main()",
			`  File "/home/me/train.py", line 12, in main`,
			"    raise ValueError(\"--lr must be positive\")",
			"ValueError: --lr must be positive",
			"",
		}}, `ValueError: --lr must be positive, at train.py:12: raise ValueError("--lr must be positive")`},
		{"a frame without its code line (python -X, or a caret line)", Crash{Stderr: []string{
			`  File "/work/a.py", line 3, in f`,
			"    ^^^^",
			"KeyError: 'x'",
		}}, "KeyError: 'x', at a.py:3"},
		{"no traceback: the last line", Crash{Stderr: []string{"loading", "CUDA error: out of memory"}}, "CUDA error: out of memory"},
		{"only library frames", Crash{Stderr: []string{
			`  File "/venv/lib/python3.11/site-packages/x.py", line 1, in g`,
			"    g()",
			"RuntimeError: boom",
		}}, "RuntimeError: boom"},
		{"no stderr: an older client's error", Crash{Error: "local rank 0 exited with 1"}, "local rank 0 exited with 1"},
		{"nothing", Crash{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.crash.Cause(); got != tt.want {
				t.Errorf("Cause() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCrashExitsSaysHowTheTrainerEnded(t *testing.T) {
	for _, tt := range []struct {
		crash          Crash
		single, plural string
	}{
		{Crash{ExitCode: 1}, "exits 1", "exit 1"},
		{Crash{ExitCode: 137, Signal: "SIGKILL"}, "is killed by SIGKILL", "are killed by SIGKILL"},
		{Crash{}, "fails", "fail"},
	} {
		if got, gotP := tt.crash.Exits(false), tt.crash.Exits(true); got != tt.single || gotP != tt.plural {
			t.Errorf("%+v: Exits = %q, %q; want %q, %q", tt.crash, got, gotP, tt.single, tt.plural)
		}
	}
}

func TestDecodeCrash(t *testing.T) {
	valid := `{"generation":4,"exit_code":1,"ran_s":0.8,"stderr":["EOFError: Ran out of input"],"max_restarts":3,"crash_loop":3,"time":"2026-01-02T03:04:05Z"}`
	tests := []struct {
		name, key, value string
		wantErr          string
	}{
		{"a valid crash", "/ringside/default/j/crashes/w0", valid, ""},
		{"a relative key", "crashes/w0", valid, ""},
		{"a key of another kind", "/ringside/default/j/status/w0", valid, "malformed crash key"},
		{"a key with no id", "crashes/", valid, "malformed crash key"},
		{"not JSON", "crashes/w0", `{"generation":`, "malformed crash of w0"},
		{"every bound", "crashes/w0", `{"generation":0,"exit_code":256,"signal":"kill","ran_s":-1,"max_restarts":-1}`,
			"generation 0 is out of range\nexit code 256 is not in 0-255\nsignal \"kill\" is not a signal's name (SIGKILL)\nran_s -1 is not a run time in seconds (0 to 3.1536e+08)\nmax_restarts -1 or crash_loop 0 is not in 0-1000000"},
		{"too many lines", "crashes/w0", `{"generation":1,"stderr":[` + strings.Repeat(`"x",`, MaxCrashLines) + `"x"]}`, "21 stderr lines, more than 20"},
		{"a line too long", "crashes/w0", `{"generation":1,"stderr":["` + strings.Repeat("x", MaxCrashLineLen+1) + `"]}`, "a stderr line is 513 bytes, more than 512"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, c, err := DecodeCrash(tt.key, []byte(tt.value))
			switch {
			case tt.wantErr == "" && (err != nil || id != "w0" || c.Generation != 4):
				t.Fatalf("DecodeCrash = %q, %+v, %v", id, c, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("DecodeCrash = %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}

func TestTrimTextKeepsValidUTF8WithinTheLimit(t *testing.T) {
	long := strings.Repeat("é", 300) // 600 bytes
	got := TrimText(long, MaxCrashLineLen)
	if len(got) > MaxCrashLineLen || !strings.HasSuffix(got, "…") || !strings.HasPrefix(got, "éé") {
		t.Fatalf("TrimText = %q (%d bytes)", got, len(got))
	}
	if got := TrimText("a\xffb", 10); got != "a\uFFFDb" {
		t.Fatalf("TrimText of invalid UTF-8 = %q", got)
	}
}
