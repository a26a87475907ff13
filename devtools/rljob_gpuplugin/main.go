// rljob-gpu-plugin is the test environment's device plugin: it advertises N `nvidia.com/gpu`
// devices to its node's kubelet through the kubelet's device-plugin API, so that the
// scheduler and the kubelet account for GPUs on a real test node as they would for real
// ones. The devices are not real: a container allocated some gets NVIDIA_VISIBLE_DEVICES
// naming them, and nothing else.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

const resourceName = "nvidia.com/gpu"

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream pluginapi.DevicePlugin_ListAndWatchServer) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done() // the devices never change
	return nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, container := range req.ContainerRequests {
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{"NVIDIA_VISIBLE_DEVICES": strings.Join(container.DevicesIds, ",")},
		})
	}
	return resp, nil
}

func serve(dir string, devices int) (*grpc.Server, string, error) {
	socket := filepath.Join(dir, "rljob-gpu.sock")
	_ = os.Remove(socket)
	listener, err := net.Listen("unix", socket)
	if err != nil {
		return nil, "", err
	}
	p := &plugin{}
	for i := 0; i < devices; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("gpu-%d", i), Health: pluginapi.Healthy})
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() { _ = server.Serve(listener) }()
	return server, socket, nil
}

func register(dir string) error {
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "kubelet.sock"),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     "rljob-gpu.sock",
		ResourceName: resourceName,
	})
	return err
}

func main() {
	devices := flag.Int("devices", 1, "how many nvidia.com/gpu devices to advertise")
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin directory")
	flag.Parse()
	// A kubelet that starts removes every socket in the directory, ours too: then serve and
	// register again, until the kubelet takes the registration and our socket stays.
	for {
		server, socket, err := serve(*dir, *devices)
		if err != nil {
			log.Fatalf("cannot listen: %v", err)
		}
		if err = register(*dir); err != nil {
			log.Printf("registering with the kubelet: %v (retrying)", err)
			server.Stop()
			time.Sleep(time.Second)
			continue
		}
		log.Printf("advertising %d %s devices on %s", *devices, resourceName, socket)
		for {
			time.Sleep(2 * time.Second)
			if _, err := os.Stat(socket); err != nil {
				break
			}
		}
		server.Stop()
	}
}
