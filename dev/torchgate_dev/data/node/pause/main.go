// Command pause is PID 1 of a pod sandbox on torchgate's local kubelet node.
//
// Why our own: the build machines reach no container registry, so the usual
// registry.k8s.io/pause image cannot be pulled; this program does the same job and is built
// from source with the local Go toolchain (no dependencies). It holds the pod's namespaces open,
// waits for SIGINT or SIGTERM and then exits 0, and reaps the zombies that end up parented to it
// when the pod shares one PID namespace.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "-v" || os.Args[1] == "--version") {
		fmt.Println("pause (torchgate)")
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: warning: not running as PID 1")
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		fmt.Fprintf(os.Stderr, "pause: shutting down, got signal %v\n", sig)
		os.Exit(0)
	}
}

// reap collects every exited child; SIGCHLD is coalesced, so one signal may stand for several.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
	}
}
