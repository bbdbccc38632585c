package netopt

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// WriteEnvFile writes s as KEY=VALUE lines with the reasons and warnings as
// comments: the format of docker --env-file, systemd EnvironmentFile and
// kubectl create configmap --from-env-file. No value needs quoting.
func WriteEnvFile(w io.Writer, s Settings) error {
	return writeKeyValues(w, s, "NCCL settings for this node, chosen by ringside netopt.")
}

// WriteConfFile writes s in the format NCCL reads from the file named by
// NCCL_CONF_FILE (and ~/.nccl.conf, /etc/nccl.conf): KEY=VALUE lines, lines
// starting with '#' ignored. Variables already set in the environment take
// precedence over the file.
func WriteConfFile(w io.Writer, s Settings) error {
	return writeKeyValues(w, s, "NCCL configuration chosen by ringside netopt; point NCCL_CONF_FILE at this file.\n"+
		"Variables set in the environment take precedence over these.")
}

func writeKeyValues(w io.Writer, s Settings, header string) error {
	bw := bufio.NewWriter(w)
	comment(bw, header)
	for _, warning := range s.Warnings {
		comment(bw, "warning: "+warning)
	}
	for _, e := range s.Env {
		comment(bw, e.Reason)
		fmt.Fprintf(bw, "%s=%s\n", e.Name, e.Value)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write settings: %w", err)
	}
	return nil
}

// comment writes text as '#' lines; a newline in text never ends a comment.
func comment(w io.Writer, text string) {
	for line := range strings.SplitSeq(text, "\n") {
		fmt.Fprintf(w, "# %s\n", line)
	}
}
