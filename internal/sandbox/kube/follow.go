package kube

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// follow waits on the watches open makes, one after another, handing
// each event to each, until each or read says done (true) or fails, or
// ctx ends (false, nil: the caller says what it waited for). The API
// server ends a watch when it likes, and a host's client ends every
// request at its timeout (30 s), watches too, so a wait longer than that
// opens the watch again. read, when set, looks at the object as it is
// once each watch is open (a change between the two is then in one or
// the other); a watch begun from no version needs none, as its first
// events are the objects as they are.
func follow(ctx context.Context, open func() (watch.Interface, error), read func() (bool, error), each func(watch.Event) (bool, error)) (bool, error) {
	pause := time.Duration(0)
	for {
		w, err := open()
		if ctx.Err() != nil {
			if err == nil {
				w.Stop()
			}
			return false, nil
		}
		if err != nil {
			return false, err
		}
		began := time.Now()
		done, err := followOne(ctx, w, read, each)
		if done || err != nil {
			return done, err
		}
		// A watch that ends at once, again and again (a proxy between
		// that cuts it), is opened again less and less often.
		if time.Since(began) > time.Second {
			pause = 0
		} else {
			pause = min(max(2*pause, 50*time.Millisecond), 2*time.Second)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, nil
		case <-t.C:
		}
	}
}

// followOne is follow's wait on one watch, w, which it stops.
func followOne(ctx context.Context, w watch.Interface, read func() (bool, error), each func(watch.Event) (bool, error)) (bool, error) {
	defer w.Stop()
	if read != nil {
		if done, err := read(); done || err != nil {
			return done, err
		}
	}
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case ev, ok := <-w.ResultChan():
			if !ok {
				return false, nil
			}
			if done, err := each(ev); done || err != nil {
				return done, err
			}
		}
	}
}
