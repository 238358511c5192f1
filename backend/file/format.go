package file

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"
)

// maxFence keeps fences exact in every consumer (JavaScript, Lua).
const maxFence = 1<<53 - 1

// A value file: valueMagic, the fence and the until (Unix nanoseconds, 0
// for none) as big-endian int64s, the key's length as a big-endian uint32,
// the key, then the stored bytes.
const (
	valueMagic  = "HGV1"
	valueHeader = len(valueMagic) + 8 + 8 + 4
)

type value struct {
	fence int64
	until int64 // Unix nanoseconds; 0: none
	key   string
	data  []byte
}

func encodeValue(v value) []byte {
	b := make([]byte, 0, valueHeader+len(v.key)+len(v.data))
	b = append(b, valueMagic...)
	b = binary.BigEndian.AppendUint64(b, uint64(v.fence))
	b = binary.BigEndian.AppendUint64(b, uint64(v.until))
	b = binary.BigEndian.AppendUint32(b, uint32(len(v.key)))
	b = append(b, v.key...)
	return append(b, v.data...)
}

var errForeign = errors.New("file: not a value file of this package")

func decodeValue(b []byte) (value, error) {
	if len(b) < valueHeader || string(b[:len(valueMagic)]) != valueMagic {
		return value{}, errForeign
	}
	p := len(valueMagic)
	v := value{
		fence: int64(binary.BigEndian.Uint64(b[p:])),
		until: int64(binary.BigEndian.Uint64(b[p+8:])),
	}
	n := int(binary.BigEndian.Uint32(b[p+16:]))
	if n > len(b)-valueHeader || v.fence < 0 || v.fence > maxFence {
		return value{}, errForeign
	}
	v.key = string(b[valueHeader : valueHeader+n])
	v.data = b[valueHeader+n:]
	return v, nil
}

// readValue reads the value file at path: ok is false when there is none,
// or it is foreign, or it holds another key (a hash collision).
func readValue(path, key string) (v value, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return value{}, false, nil
	}
	if err != nil {
		return value{}, false, err
	}
	v, err = decodeValue(b)
	if err != nil || v.key != key {
		return value{}, false, nil
	}
	return v, true, nil
}

// expired reports whether v is past its until at now.
func (v value) expired(now time.Time) bool {
	return v.until != 0 && v.until <= now.UnixNano()
}

// state is a lock's grant, kept in its state file. A zero token means no
// grant; the fence stays after a release.
type state struct {
	token   string
	fence   int64
	expires int64 // Unix microseconds: the lease's end
	beat    int64 // Unix microseconds: the holder's last beat
	dead    int64 // microseconds after its last beat when the holder counts as dead
	flocked bool  // the holder has the lock file's flock
	pid     int   // the holder's process, for people reading the file
	foreign bool  // the file held something else
}

const stateMagic = "hgstate1"

func (st state) encode() []byte {
	tok := st.token
	if tok == "" {
		tok = "-"
	}
	fl := 0
	if st.flocked {
		fl = 1
	}
	return fmt.Appendf(nil, "%s %s %d %d %d %d %d %d\n", stateMagic, tok, st.fence, st.expires, st.beat, st.dead, fl, st.pid)
}

func decodeState(b []byte) state {
	f := strings.Fields(string(b))
	if len(f) != 8 || f[0] != stateMagic {
		return state{foreign: true}
	}
	var n [6]int64
	for i := range n {
		x, err := strconv.ParseInt(f[i+2], 10, 64)
		if err != nil || x < 0 {
			return state{foreign: true}
		}
		n[i] = x
	}
	st := state{token: f[1], fence: n[0], expires: n[1], beat: n[2], dead: n[3], flocked: n[4] == 1, pid: int(n[5])}
	if st.token == "-" {
		st.token = ""
	}
	if st.fence > maxFence {
		st.fence = 0
	}
	return st
}

// readState reads a state file; a missing one is a free lock that never
// had a grant.
func readState(path string) (state, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return state{}, nil
	}
	if err != nil {
		return state{}, err
	}
	if len(b) == 0 {
		return state{}, nil
	}
	return decodeState(b), nil
}

// granted reports whether st holds an unexpired grant at now (Unix
// microseconds).
func (st state) granted(now int64) bool {
	return st.token != "" && st.expires > now
}

// readCounter reads the namespace's fence counter; anything unreadable
// counts as 0 (the clock keeps fences growing).
func readCounter(path string) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 32))
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 || n > maxFence {
		return 0, nil
	}
	return n, nil
}

func nowMicro() int64 { return time.Now().UnixMicro() }
