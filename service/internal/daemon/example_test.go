package daemon_test

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/sluicehq/sluice/service/internal/daemon"
)

// A daemon with serve's defaults (the memory store, the bundled example
// rules) on ports the kernel picks, asked whether it is ready, then
// drained and stopped.
func ExampleDaemon() {
	c := daemon.Defaults()
	c.GRPCAddr, c.HTTPAddr, c.DrainDelay = "127.0.0.1:0", "127.0.0.1:0", 0
	d, err := daemon.New(c, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := d.Start(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	resp, err := http.Get("http://" + d.HTTPAddr() + "/readyz")
	if err != nil {
		fmt.Println(err)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	fmt.Println("readyz:", resp.StatusCode)
	fmt.Println("close:", d.Close(context.Background()))
	// Output:
	// readyz: 200
	// close: <nil>
}
