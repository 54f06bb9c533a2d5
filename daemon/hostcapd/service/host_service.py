"""HostService for one tenant: what this host enforces for it."""

from __future__ import annotations

from hostcapd import __version__
from hostcapd.bridge import messages
from hostcapd.bridge.frontends import RelayedCall
from hostcapd.config import LIMIT_NAMES, Limits, Tier
from hostcapd.service import convert
from hostcapd.tenant import TenantRuntime


class HostService:
    """hostcap.v1.HostService for one tenant."""

    def __init__(self, runtime: TenantRuntime) -> None:
        self.runtime = runtime

    async def Capabilities(
        self, request: messages.CapabilitiesCall, call: RelayedCall
    ) -> messages.CapabilitiesResponse:
        rt = self.runtime
        tenant, profile = rt.tenant, rt.profile
        cg = rt.cgroups.support
        return messages.CapabilitiesResponse(
            tenant=tenant.name,
            daemon_version=__version__,
            run_as_uid=tenant.uid,
            run_as_gid=tenant.gid,
            roots=[
                messages.Root(
                    path=str(r.path),
                    tier="READ_WRITE" if r.tier is Tier.READ_WRITE else "READ_ONLY",
                    primary=i == 0,
                )
                for i, r in enumerate(tenant.roots)
            ],
            path=[str(p) for p in tenant.path],
            allowed_executable_dirs=[str(p) for p in tenant.allowed_executable_dirs],
            default_limits=convert.limits_message(
                Limits.model_validate({n: tenant.limits.effective_default(n) for n in LIMIT_NAMES})
            ),
            ceilings=convert.limits_message(tenant.limits.ceiling),
            protections=convert.protections_message(profile.protections),
            landlock_abi=profile.landlock_abi,
            cgroup_version=cg.version if profile.has("cgroup") else "",
            cgroup_controllers=list(cg.controllers) if profile.has("cgroup") else [],
            memory_limit_mechanism=profile.memory_mechanism,
            max_concurrent_spawns=tenant.max_concurrent_spawns,
            env_allowlist=list(tenant.env_allowlist),
            max_read_bytes=tenant.fs.max_read_bytes,
            max_write_bytes=tenant.fs.max_write_bytes,
            fs_protections=convert.protections_message(rt.fs.protections) if rt.fs else [],
            socket_families=list(profile.socket_families),
            cpu_weight=profile.cpu_share.weight if profile.cpu_share else 0,
            cpu_max_cores=(profile.cpu_share.max_cores or 0.0) if profile.cpu_share else 0.0,
            disk_budget_bytes=profile.disk.budget_bytes if profile.disk else 0,
            disk_budget_mechanism=profile.disk.mechanism if profile.disk else "",
            frontend_protections=list(rt.frontend.protections) if rt.frontend is not None else [],
            frontend_uid=rt.frontend.identity[0] if rt.frontend is not None else 0,
        )
