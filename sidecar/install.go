package sidecar

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/ringside/ringside/netopt"
)

// installBinary copies the running executable to dst (Config.InstallTo),
// atomically, so a trainer container that shares dst's volume can run
// `ringside exec` without ringside in its image. It runs before the API
// serves, so a trainer started once the sidecar answers its startup probe
// finds the binary complete.
func installBinary(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install the ringside binary: find this executable: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("install the ringside binary: %w", err)
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("install the ringside binary: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".ringside-*")
	if err != nil {
		return fmt.Errorf("install the ringside binary: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	_, err = io.Copy(tmp, src)
	if err == nil {
		err = tmp.Chmod(0o755)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return fmt.Errorf("install the ringside binary at %s: %w", dst, err)
	}
	return nil
}

// writeNCCLConf writes netopt's settings as the file NCCL reads from
// NCCL_CONF_FILE (Config.NCCLConfFile), atomically, before the API
// serves: for trainers that read no settings from the API (a plain
// torchrun script, Horovod). Variables in the environment still win.
func writeNCCLConf(path string, s netopt.Settings) error {
	var b bytes.Buffer
	if err := netopt.WriteConfFile(&b, s); err != nil {
		return fmt.Errorf("NCCL configuration file: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("NCCL configuration file: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("NCCL configuration file: %w", err)
	}
	return nil
}
