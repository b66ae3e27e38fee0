package toolstest

import (
	"os"
	"path/filepath"
)

func mkfile(p, content string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o644)
}

func readfile(p string) ([]byte, error) { return os.ReadFile(p) }
