//! gRPC over the plugin's unix socket, without generated code: each of the three CSI services is a
//! small tower service that routes on the method path and hands the decoded message to the
//! [`Plugin`]. A method not listed answers UNIMPLEMENTED, which is what the spec
//! asks of a node-only plugin for every Controller call but `ControllerGetCapabilities`.

use std::convert::Infallible;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::Status;
use tonic::body::Body;
use tonic::server::{NamedService, UnaryService};

use super::Plugin;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;
type HttpResult = Result<http::Response<Body>, Infallible>;

/// Turns a one-shot async handler into tonic's unary service.
struct Once<F>(Option<F>);

impl<Req, Resp, F, Fut> UnaryService<Req> for Once<F>
where
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Result<Resp, Status>> + Send + 'static,
    Resp: Send + 'static,
{
    type Response = Resp;
    type Future = BoxFuture<Result<tonic::Response<Resp>, Status>>;

    fn call(&mut self, request: tonic::Request<Req>) -> Self::Future {
        match self.0.take() {
            Some(f) => {
                let fut = f(request.into_inner());
                Box::pin(async move { fut.await.map(tonic::Response::new) })
            }
            None => Box::pin(async { Err(Status::internal("handler called twice")) }),
        }
    }
}

/// Decodes the request as `Req`, runs `f`, encodes its answer or status.
fn unary<Req, Resp, F, Fut>(req: http::Request<Body>, f: F) -> BoxFuture<HttpResult>
where
    Req: prost::Message + Default + Send + 'static,
    Resp: prost::Message + Send + 'static,
    F: FnOnce(Req) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Resp, Status>> + Send + 'static,
{
    Box::pin(async move {
        let mut grpc = tonic::server::Grpc::new(tonic_prost::ProstCodec::<Resp, Req>::default());
        Ok(grpc.unary(Once(Some(f)), req).await)
    })
}

fn unimplemented(path: &str) -> BoxFuture<HttpResult> {
    let status = Status::unimplemented(format!("{path} is not implemented by the hubfs node plugin"));
    Box::pin(async move { Ok(status.into_http()) })
}

macro_rules! csi_service {
    ($name:ident, $svc:literal, $route:ident) => {
        #[derive(Clone)]
        pub struct $name(pub Arc<Plugin>);

        impl NamedService for $name {
            const NAME: &'static str = $svc;
        }

        impl tower::Service<http::Request<Body>> for $name {
            type Response = http::Response<Body>;
            type Error = Infallible;
            type Future = BoxFuture<HttpResult>;

            fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
                Poll::Ready(Ok(()))
            }

            fn call(&mut self, req: http::Request<Body>) -> Self::Future {
                $route(self.0.clone(), req)
            }
        }
    };
}

csi_service!(IdentityService, "csi.v1.Identity", route_identity);
csi_service!(NodeService, "csi.v1.Node", route_node);
csi_service!(ControllerService, "csi.v1.Controller", route_controller);

fn method(req: &http::Request<Body>) -> String {
    req.uri().path().rsplit('/').next().unwrap_or_default().to_string()
}

fn route_identity(p: Arc<Plugin>, req: http::Request<Body>) -> BoxFuture<HttpResult> {
    use super::identity;
    match method(&req).as_str() {
        "GetPluginInfo" => unary(req, move |_: super::proto::GetPluginInfoRequest| async move {
            Ok(identity::plugin_info())
        }),
        "GetPluginCapabilities" => unary(req, move |_: super::proto::GetPluginCapabilitiesRequest| async move {
            Ok(identity::capabilities())
        }),
        "Probe" => unary(req, move |_: super::proto::ProbeRequest| async move { Ok(p.probe()) }),
        _ => unimplemented(req.uri().path()),
    }
}

fn route_controller(_p: Arc<Plugin>, req: http::Request<Body>) -> BoxFuture<HttpResult> {
    match method(&req).as_str() {
        "ControllerGetCapabilities" => unary(req, |_: super::proto::ControllerGetCapabilitiesRequest| async {
            Ok(super::proto::ControllerGetCapabilitiesResponse::default())
        }),
        _ => unimplemented(req.uri().path()),
    }
}

fn route_node(p: Arc<Plugin>, req: http::Request<Body>) -> BoxFuture<HttpResult> {
    use super::proto::*;
    match method(&req).as_str() {
        "NodeGetCapabilities" => unary(req, move |_: NodeGetCapabilitiesRequest| async move {
            Ok(super::node::capabilities())
        }),
        "NodeGetInfo" => unary(req, move |_: NodeGetInfoRequest| async move { Ok(p.node_info()) }),
        "NodePublishVolume" => unary(req, move |r: NodePublishVolumeRequest| async move {
            counted("NodePublishVolume", super::node::publish(p, r).await)
        }),
        "NodeUnpublishVolume" => unary(req, move |r: NodeUnpublishVolumeRequest| async move {
            counted("NodeUnpublishVolume", super::node::unpublish(p, r).await)
        }),
        // No STAGE_UNSTAGE_VOLUME, GET_VOLUME_STATS nor EXPAND_VOLUME capability: the spec's answer
        // to these is UNIMPLEMENTED.
        _ => unimplemented(req.uri().path()),
    }
}

/// Counts a call's result in the plugin's metrics.
fn counted<T>(method: &'static str, r: Result<T, Status>) -> Result<T, Status> {
    let code = r.as_ref().map_or_else(Status::code, |_| tonic::Code::Ok);
    super::metrics::call(method, code);
    r
}

/// Serves the three services on `socket` until `shutdown` resolves.
pub async fn serve(
    plugin: Arc<Plugin>,
    socket: &Path,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    use anyhow::Context as _;
    if let Some(dir) = socket.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // A socket left by a previous run (kill -9) would make bind fail.
    match std::fs::remove_file(socket) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing the old socket {}", socket.display())),
    }
    let listener =
        tokio::net::UnixListener::bind(socket).with_context(|| format!("listening on {}", socket.display()))?;
    // Each connection reaches the server through the `:authority` relay (see [`super::authority`]).
    let incoming = futures::stream::unfold(listener, |l| async move {
        let r = match l.accept().await {
            Ok((client, _)) => tokio::net::UnixStream::pair().map(|(ours, server)| {
                tokio::spawn(async move {
                    if let Err(e) = super::authority::relay(client, ours).await {
                        tracing::debug!(error = %e, "gRPC connection ended");
                    }
                });
                server
            }),
            Err(e) => Err(e),
        };
        Some((r, l))
    });
    tonic::transport::Server::builder()
        .add_service(IdentityService(plugin.clone()))
        .add_service(NodeService(plugin.clone()))
        .add_service(ControllerService(plugin))
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .context("gRPC server")?;
    Ok(())
}
