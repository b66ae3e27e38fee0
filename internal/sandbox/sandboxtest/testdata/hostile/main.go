// Command hostile is the neuron's side of the boundary suite
// (sandboxtest): what a hostile neuron does to host code that acts on its
// files. The suite copies it into a neuron and runs it there.
//
//	hostile swap DIR TARGET N   make N files f0.. and N symlinks l0.. -> TARGET
//	                            in DIR, then exchange each pair (renameat2
//	                            RENAME_EXCHANGE) as fast as it can, until killed
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: hostile swap DIR TARGET N")
	}
	switch os.Args[1] {
	case "swap":
		if len(os.Args) != 5 {
			fail("usage: hostile swap DIR TARGET N")
		}
		n, err := strconv.Atoi(os.Args[4])
		if err != nil || n < 1 {
			fail("N must be a positive number")
		}
		swap(os.Args[2], os.Args[3], n)
	default:
		fail("unknown command " + os.Args[1])
	}
}

func swap(dir, target string, n int) {
	fs, ls := make([]string, n), make([]string, n)
	for i := range n {
		f, l := filepath.Join(dir, fmt.Sprint("f", i)), filepath.Join(dir, fmt.Sprint("l", i))
		fs[i], ls[i] = f, l
		if err := os.WriteFile(f, []byte("mine\n"), 0o644); err != nil {
			fail(err.Error())
		}
		os.Remove(l)
		if err := os.Symlink(target, l); err != nil {
			fail(err.Error())
		}
	}
	fmt.Println("swapping")
	for {
		for i := range n {
			if err := unix.Renameat2(unix.AT_FDCWD, fs[i], unix.AT_FDCWD, ls[i], unix.RENAME_EXCHANGE); err != nil {
				fail("renameat2: " + err.Error())
			}
		}
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "hostile:", msg)
	os.Exit(2)
}
