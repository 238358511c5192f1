package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// writeInspect prints inspect's report as text.
func writeInspect(out io.Writer, r inspectReport) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("pipeline", r.Pipeline)
	row("key", r.Key)
	v := r.Value
	state := v.State
	if v.Tombstone != "" {
		state += " (" + v.Tombstone + ")"
	}
	row("value", state)
	if v.Fence != 0 {
		row("  fence", strconv.FormatInt(v.Fence, 10))
	}
	if v.Expires != nil {
		row("  expires", when(*v.Expires))
	}
	if v.StaleUntil != nil {
		row("  stale until", when(*v.StaleUntil))
	}
	if v.TTLMillis > 0 {
		row("  key ttl", ms(v.TTLMillis))
	}
	if v.Written != nil {
		row("  written", when(*v.Written))
		row("  load took", ms(v.LoadMillis))
	}
	if v.Bytes > 0 {
		row("  stored bytes", strconv.Itoa(v.Bytes))
	}
	if v.Undecodable != "" {
		row("  undecodable", v.Undecodable)
	}
	if v.Value != nil {
		row("  value", strconv.Quote(*v.Value))
	}
	lockRows(row, r.Lock)
	return tw.Flush()
}

func lockRows(row func(k, v string), l lockState) {
	switch {
	case !l.Held:
		row("lock", "free")
	case l.Foreign:
		row("lock", "held (foreign data)")
	default:
		row("lock", "held")
	}
	if l.Token != "" {
		row("  token", l.Token)
	}
	if l.Fence != 0 {
		row("  fence", strconv.FormatInt(l.Fence, 10))
	}
	if l.BeatAgeMs != nil {
		row("  last beat", ms(*l.BeatAgeMs)+" ago")
		row("  dead after", ms(l.DeadAfter))
	}
	if l.Held {
		row("  lease left", ms(l.PTTLMs))
	}
	row("  take over", takeOverText[l.TakeOver])
}

var takeOverText = map[string]string{
	"free":    "no holder: a TryAcquire takes it",
	"no":      "no: the holder is alive",
	"dead":    "yes: the holder's beat is past its dead-after",
	"foreign": "yes: not written by herdguard",
}

// writeLocks prints locks' report as a table.
func writeLocks(out io.Writer, r locksReport) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "KEY\tFENCE\tLAST BEAT\tDEAD AFTER\tLEASE LEFT\tTAKE OVER\tTOKEN\n")
	for _, l := range r.Locks {
		beat, dead := "-", "-"
		if l.BeatAgeMs != nil {
			beat, dead = ms(*l.BeatAgeMs)+" ago", ms(l.DeadAfter)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", l.Key, l.Fence, beat, dead, ms(l.PTTLMs), l.TakeOver, l.Token)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "%d held locks in pipeline %s\n", len(r.Locks), r.Pipeline)
	return err
}

func ms(n int64) string { return (time.Duration(n) * time.Millisecond).String() }

// when prints t with how far it is from now.
func when(t time.Time) string {
	d := time.Until(t).Round(time.Millisecond)
	rel := "in " + d.String()
	if d < 0 {
		rel = strings.TrimPrefix(d.String(), "-") + " ago"
	}
	return t.Format("2006-01-02T15:04:05.000Z07:00") + " (" + rel + ")"
}
