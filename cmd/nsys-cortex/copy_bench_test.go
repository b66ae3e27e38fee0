package main_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// BenchmarkCopyOut is `nsys-cortex cp N:tree DIR` of 1,000 small files in
// 20 directories and one 32 MiB file, out of a neuron of each mode this
// machine runs (process, and nsbox where it can): the path the review's
// symlink attacks went through.
func BenchmarkCopyOut(b *testing.B) {
	for _, mode := range []string{"process", "nsbox"} {
		b.Run(mode, func(b *testing.B) {
			d, err := os.MkdirTemp("", "cxb")
			if err != nil {
				b.Fatal(err)
			}
			defer os.RemoveAll(d)
			env := append(os.Environ(), "NSYS_CORTEX_HOME="+filepath.Join(d, "h"), "NSYS_CORTEX_ALLOW_INSECURE_DEV=1", "NSYS_CORTEX_MODE="+mode, "NSYS_CORTEX_AGENT_BIN=")
			run := func(args ...string) {
				b.Helper()
				cmd := exec.Command(filepath.Join(binDir, "nsys-cortex"), args...)
				cmd.Env = env
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("nsys-cortex %v: %v\n%s", args, err, out)
				}
			}
			cmd := exec.Command(filepath.Join(binDir, "nsys-cortex"), "create", "bn")
			cmd.Env = env
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Skipf("mode %s cannot run here: %v %s", mode, err, out)
			}
			defer run("destroy", "--wipe", "bn")
			run("exec", "bn", "--", "sh", "-c", `for d in $(seq -w 0 19); do mkdir -p tree/d$d; for f in $(seq -w 0 49); do head -c 4096 /dev/urandom > tree/d$d/f$f; done; done; head -c 33554432 /dev/urandom > tree/big`)
			b.SetBytes(1000*4096 + 32<<20)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				dst := filepath.Join(d, "out")
				os.RemoveAll(dst)
				b.StartTimer()
				run("cp", "bn:tree", dst)
			}
		})
	}
}
