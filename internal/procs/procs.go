// Package procs runs child processes that serve HTTP (relay services under
// test or under load): start one, wait until its readiness URL answers,
// stop it gracefully or kill it as a crash would.
package procs

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"syscall"
	"time"
)

// ErrExited is returned by WaitReady when the process ends before it is ready.
var ErrExited = errors.New("exited before it was ready")

// Process is a started child process whose exit is awaited in the
// background. Its methods are safe for concurrent use and may be called
// after the process has exited.
type Process struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error // cmd.Wait's result; set before exited is closed
}

// Start starts cmd and waits for its exit in the background.
func Start(cmd *exec.Cmd) (*Process, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Wait waits for the process to exit and returns what exec.Cmd.Wait
// returned (an *exec.ExitError for a non-zero exit or a signal).
func (p *Process) Wait() error {
	<-p.exited
	return p.err
}

// Kill ends the process with SIGKILL, without any chance to clean up (as a
// crash would), and waits for it to exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Stop sends SIGTERM and waits up to grace for the process to exit; then it
// kills it. It reports whether the process exited within grace.
func (p *Process) Stop(grace time.Duration) bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
		return true
	case <-timer.C:
		p.Kill()
		return false
	}
}

// WaitReady polls url until it answers 200 OK. It fails with ErrExited
// (wrapped, with the exit status) when the process exits first, with ctx's
// error when ctx ends, and when d passes.
func (p *Process) WaitReady(ctx context.Context, url string, d time.Duration) error {
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if ready(ctx, url) {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%w (%v)", ErrExited, p.err)
		case <-ctx.Done():
			if err := outer.Err(); err != nil {
				return err
			}
			return fmt.Errorf("not ready after %s", d)
		case <-tick.C:
		}
	}
}

// ready reports whether GET url answers 200 OK.
func ready(ctx context.Context, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
