package procstat

import (
	"os"
	"testing"
)

func TestRead(t *testing.T) {
	// USER_HZ is 100 on every Linux architecture Go runs on.
	if got := ClockTicks(); got != 100 {
		t.Errorf("ClockTicks() = %d, want 100", got)
	}
	s, err := Read(os.Getpid(), 100)
	if err != nil || s.StartTime == "" {
		t.Errorf("Read(self) = %+v, %v", s, err)
	}
	if _, err := Read(-1, 100); err == nil {
		t.Error("Read(-1) gave no error")
	}
}
