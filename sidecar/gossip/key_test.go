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
		{name: "raw 10 bytes is refused", content: []byte("0123456789"), wantErr: "line 1 (10 bytes) is not the base64"},
		{name: "base64 of 20 bytes is refused", content: []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 20))), wantErr: "is not the base64 of a 16, 24 or 32 byte key"},
		{name: "an empty file is refused", content: nil, wantErr: "holds 0 bytes and no key"},
		{name: "only comments are refused", content: []byte("# no key yet\n\n"), wantErr: "and no key"},
		{name: "a raw 16 byte key with a newline is refused", content: append(bytes.Clone(raw16), '\n'), wantErr: "line 1 (16 bytes)"},
	}
	for _, tt := range tests {
		t.Run(tt.name+" says how to make a key", func(t *testing.T) {
			if tt.wantErr == "" {
				return
			}
			if _, err := ParseKeys(tt.content); err == nil || !strings.Contains(err.Error(), "ringside gossip-key") {
				t.Fatalf("ParseKeys: %v, want advice naming ringside gossip-key", err)
			}
		})
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

func TestLoadKeysReadsAKeyringPrimaryFirst(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 16)
	content := "# rotation: the first key encrypts\n" + base64.StdEncoding.EncodeToString(k2) + "\n\n  " +
		base64.StdEncoding.EncodeToString(k1) + "  \n" + base64.StdEncoding.EncodeToString(k2) + "\n"
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := LoadKeys(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || !bytes.Equal(keys[0], k2) || !bytes.Equal(keys[1], k1) {
		t.Fatalf("LoadKeys = %x, want [%x %x] (a repeated key once)", keys, k2, k1)
	}
}

func TestParseKeysNeverQuotesTheContent(t *testing.T) {
	secret := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{9}, 32))
	_, err := ParseKeys([]byte(secret + "\n" + secret[:20] + "\n"))
	if err == nil || strings.Contains(err.Error(), secret[:20]) {
		t.Fatalf("ParseKeys = %v: want an error that does not quote the file", err)
	}
}

func TestNewKeyIsARandomAES256Key(t *testing.T) {
	a, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewKey()
	keys, err := DecodeKeys([]string{a, b})
	if err != nil || len(keys) != 2 || len(keys[0]) != KeySize {
		t.Fatalf("DecodeKeys(NewKey x2) = %d keys, %v; want two distinct %d byte keys", len(keys), err, KeySize)
	}
}
