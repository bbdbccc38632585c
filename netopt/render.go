package netopt

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Format is a file format the settings of a node are written in.
type Format string

const (
	// FormatEnv is KEY=VALUE lines (WriteEnvFile).
	FormatEnv Format = "env"
	// FormatConf is the file NCCL reads from NCCL_CONF_FILE (WriteConfFile).
	FormatConf Format = "conf"
	// FormatXML is an NCCL topology file for NCCL_TOPO_FILE (WriteTopologyXML).
	FormatXML Format = "xml"
)

// Validate reports a format that is none of the constants, as a
// *FieldError of field "Format".
func (f Format) Validate() error {
	switch f {
	case FormatEnv, FormatConf, FormatXML:
		return nil
	}
	return &FieldError{Field: "Format", Name: "format", Problem: fmt.Sprintf("must be %s, %s or %s, got %q", FormatEnv, FormatConf, FormatXML, f)}
}

// Write writes s in format f; FormatXML writes h's topology instead, the
// file NCCL reads beside the settings.
func (f Format) Write(w io.Writer, h *Host, s Settings) error {
	switch f {
	case FormatConf:
		return WriteConfFile(w, s)
	case FormatXML:
		return WriteTopologyXML(w, h)
	case FormatEnv:
		return WriteEnvFile(w, s)
	}
	return f.Validate()
}

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
