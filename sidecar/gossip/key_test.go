package gossip

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadKey(t *testing.T) {
	raw16 := []byte("0123456789abcdef")
	raw32 := bytes.Repeat([]byte{0xfe, 0x01}, 16)
	tests := []struct {
		name    string
		content []byte
		want    []byte
		wantErr string
	}{
		{name: "raw 16 bytes", content: raw16, want: raw16},
		{name: "raw 32 binary bytes", content: raw32, want: raw32},
		{name: "raw 24 bytes", content: []byte("0123456789abcdef01234567"), want: []byte("0123456789abcdef01234567")},
		{name: "base64 of 32 bytes with a newline", content: []byte(base64.StdEncoding.EncodeToString(raw32) + "\n"), want: raw32},
		{name: "base64 of 16 bytes without padding", content: []byte(base64.RawStdEncoding.EncodeToString(raw16)), want: raw16},
		{name: "raw 10 bytes is refused", content: []byte("0123456789"), wantErr: "holds 10 bytes"},
		{name: "base64 of 20 bytes is refused", content: []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 20))), wantErr: "neither a 16, 24 or 32 byte key nor the base64 of one"},
		{name: "an empty file is refused", content: nil, wantErr: "holds 0 bytes"},
		{name: "a raw 16 byte key with a newline is refused", content: append(bytes.Clone(raw16), '\n'), wantErr: "holds 17 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "key")
			if err := os.WriteFile(path, tt.content, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := LoadKey(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LoadKey: %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("LoadKey = %x, want %x", got, tt.want)
			}
		})
	}
}

func TestLoadKeyOfAMissingFileSaysSo(t *testing.T) {
	_, err := LoadKey(filepath.Join(t.TempDir(), "absent"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("LoadKey: %v, want fs.ErrNotExist", err)
	}
}
