//go:build !linux

package link

import (
	"errors"
	"os"
)

// openRegular fails: without Linux's openat2 a path cannot be opened
// confined beneath the view's root, so every copy goes through the channel.
func (v *HostView) openRegular(string, int, bool) (*os.File, error) {
	return nil, errNoOpenat2
}

var errNoOpenat2 = errors.New("host views need openat2 (Linux)")

// checkPassed refuses: passed files are used on Linux only.
func checkPassed(*os.File, bool) (int64, error) { return 0, errNoOpenat2 }

// copyFiles leaves the copy to io.Copy.
func copyFiles(*os.File, *os.File, int64) (int64, error) { return 0, errNoKernelCopy }

func reserveBlocks(*os.File, int64, int64) {}
