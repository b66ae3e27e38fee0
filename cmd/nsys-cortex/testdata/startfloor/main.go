// Command startfloor is the floor of TestStartIsLight and
// BenchmarkCLIStart: a Go program that does nothing, which says, as
// nsys-cortex does with NSYS_CORTEX_DEBUG_START=1, how much CPU it used
// before main.
package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

func main() {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
	fmt.Fprintf(os.Stderr, "nsys-cortex: cpu before main: %d us\n", ts.Nano()/1000)
}
