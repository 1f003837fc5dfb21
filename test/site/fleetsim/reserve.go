package fleetsim

import (
	"fmt"
	"syscall"
)

// reservePort binds a socket to 127.0.0.1:port without listening on it, so that a stopped
// member's port stays its own: a connection to it is refused, as to a stopped API server,
// and no other listener or outgoing connection of the process takes the port before Resume.
// It returns the socket, to close before listening again.
func reservePort(port int) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("reserving port %d: %w", port, err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		_ = syscall.Close(fd)
		return -1, fmt.Errorf("reserving port %d: %w", port, err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		return -1, fmt.Errorf("reserving port %d: %w", port, err)
	}
	return fd, nil
}
