//! What the kernel was doing: interrupt kinds of wakers ([`irq_kind`]) and on-CPU noise
//! of items' samples ([`kernel_work`], [`Noise`]).

use serde::Serialize;

/// What kind of interrupt woke a thread, from the waker's kernel frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IrqKind {
    Timer,
    Disk,
    Network,
    Other,
}

impl IrqKind {
    pub fn name(self) -> &'static str {
        match self {
            IrqKind::Timer => "timer",
            IrqKind::Disk => "disk",
            IrqKind::Network => "network",
            IrqKind::Other => "other",
        }
    }
}

/// The interrupt kind of a wakeup whose waker stack has `frames` (names, root first);
/// `idle`: the waker was the idle task. `None`: a wakeup in thread context.
pub fn irq_kind(frames: &[&str], idle: bool) -> Option<IrqKind> {
    const IRQ_ENTRY: &[&str] = &[
        "sysvec_",
        "asm_sysvec_",
        "common_interrupt",
        "asm_common_interrupt",
        "do_IRQ",
        "__do_softirq",
        "handle_softirqs",
        "irq_exit",
        "handle_irq",
        "do_softirq",
        "run_ksoftirqd",
        "hrtimer_interrupt",
        "__sysvec_",
        "handle_edge_irq",
        "handle_fasteoi_irq",
    ];
    let in_irq = idle || frames.iter().any(|f| IRQ_ENTRY.iter().any(|p| f.starts_with(p)));
    if !in_irq {
        return None;
    }
    let has = |ps: &[&str]| frames.iter().any(|f| ps.iter().any(|p| f.contains(p)));
    Some(if has(&["hrtimer", "tick_sched", "timerfd", "it_real_fn", "run_timer", "call_timer_fn", "apic_timer"]) {
        IrqKind::Timer
    } else if has(&["blk_mq", "blk_update_request", "bio_endio", "scsi_", "nvme_", "virtblk", "end_bio"]) {
        IrqKind::Disk
    } else if has(&["net_rx", "napi", "netif_receive", "ip_rcv", "tcp_v4_rcv", "tcp_v6_rcv", "virtnet", "sock_def_readable"]) {
        IrqKind::Network
    } else {
        IrqKind::Other
    })
}

/// What the kernel was doing in an on-CPU sample (on-CPU noise), from the sample's kernel
/// frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KernelWork<'a> {
    /// A hardware interrupt handler (or the interrupt entry/exit around it).
    HardIrq,
    /// A softirq (`__do_softirq`, `ksoftirqd`).
    SoftIrq,
    /// The page-fault handler.
    PageFault,
    /// A system call, by name (`getppid` from `__x64_sys_getppid`; `?` when the syscall
    /// entry is on the stack but not the function of the call).
    Syscall(&'a str),
    /// Named kernel code that is none of the above (kernel threads, scheduler entry).
    Other,
    /// Kernel frames without names (no kernel symbols): the kind is not known.
    Unknown,
}

/// Kernel functions of a hardware interrupt (prefixes).
const HARDIRQ: &[&str] = &[
    "asm_sysvec_",
    "sysvec_",
    "__sysvec_",
    "asm_common_interrupt",
    "common_interrupt",
    "do_IRQ",
    "handle_irq_event",
    "handle_edge_irq",
    "handle_fasteoi_irq",
    "irq_exit_rcu",
    "__irq_exit_rcu",
    "hrtimer_interrupt",
    "smp_apic_timer_interrupt",
    "apic_timer_interrupt",
    "asm_exc_nmi",
    "exc_nmi",
];
const SOFTIRQ: &[&str] = &["__do_softirq", "handle_softirqs", "do_softirq", "do_softirq_own_stack", "run_ksoftirqd"];
const PAGE_FAULT: &[&str] = &[
    "asm_exc_page_fault",
    "exc_page_fault",
    "do_user_addr_fault",
    "do_kern_addr_fault",
    "do_page_fault",
    "handle_mm_fault",
    "__handle_mm_fault",
    "do_mem_abort",
    "el0_da",
];
/// Prefixes of the function of one system call (x86-64, i386 compat, arm64, riscv, the
/// generic wrappers, older kernels).
const SYSCALL_FN: &[&str] = &["__x64_sys_", "__ia32_sys_", "__arm64_sys_", "__riscv_sys_", "__do_sys_", "__se_sys_", "SyS_", "ksys_"];
/// glibc's wrappers of one system call in user space (`__GI___libc_write`,
/// `__libc_read`, `__GI___ioctl`, `__write_nocancel`): the call's name when the kernel
/// stack shows only the entry (the call's own function inlined into the dispatcher).
fn libc_wrapper_call(f: &str) -> Option<&str> {
    let name = ["__GI___libc_", "__libc_", "__GI___", "__GI_"].iter().find_map(|p| f.strip_prefix(p))?;
    let name = name.strip_suffix("_nocancel").unwrap_or(name);
    (!name.is_empty() && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')).then_some(name)
}
/// The system-call entry (the call's own function may not be on the stack).
const SYSCALL_ENTRY: &[&str] =
    &["do_syscall_64", "entry_SYSCALL_64", "x64_sys_call", "do_el0_svc", "el0_svc", "do_fast_syscall_32", "do_int80_syscall_32"];

/// What the kernel part of a sample was doing: `frames` are its kernel frames, root
/// first, each with whether it has a real name (a kernel symbol). The innermost frame
/// that says wins (an interrupt during a system call is interrupt time; a page fault in
/// `read` is page-fault time). Names are trusted only when named: with no kernel symbols
/// the answer is [`KernelWork::Unknown`], never a guess. A system call whose own function
/// is not on the kernel stack is named by `user_caller` (the innermost user frame) when
/// that is a glibc wrapper of one call (`__GI___libc_write` → `write`). `None`: no kernel
/// frames.
pub fn kernel_work<'a>(frames: &[(&'a str, bool)], user_caller: Option<&'a str>) -> Option<KernelWork<'a>> {
    if frames.is_empty() {
        return None;
    }
    let starts = |f: &str, ps: &[&str]| ps.iter().any(|p| f.starts_with(p));
    let mut entry = false;
    for &(f, named) in frames.iter().rev() {
        if !named {
            continue;
        }
        if starts(f, SOFTIRQ) {
            return Some(KernelWork::SoftIrq);
        }
        if starts(f, HARDIRQ) {
            return Some(KernelWork::HardIrq);
        }
        if PAGE_FAULT.contains(&f) {
            return Some(KernelWork::PageFault);
        }
        if let Some(name) = SYSCALL_FN.iter().find_map(|p| f.strip_prefix(p)) {
            if !name.is_empty() {
                return Some(KernelWork::Syscall(name));
            }
        }
        entry |= SYSCALL_ENTRY.contains(&f);
    }
    Some(if entry {
        KernelWork::Syscall(user_caller.and_then(libc_wrapper_call).unwrap_or("?"))
    } else if frames.iter().any(|&(_, named)| !named) {
        KernelWork::Unknown
    } else {
        KernelWork::Other
    })
}

/// Time of one system call inside an item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyscallTime {
    /// The call's name (`write`), `?` when only the entry was on the stack.
    pub name: String,
    pub ns: u64,
    pub samples: u64,
}

/// An item's on-CPU noise: its samples with kernel frames by what the kernel was doing
/// ([`kernel_work`]), as time (samples × the mean sample interval), and how often its
/// thread changed CPU inside it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Noise {
    /// Samples of the item with kernel frames (the rest ran in user space, or had no
    /// stack).
    pub kernel_samples: u64,
    pub hardirq_ns: u64,
    pub softirq_ns: u64,
    pub page_fault_ns: u64,
    /// By call, largest first.
    pub syscalls: Vec<SyscallTime>,
    /// Named kernel code of no kind above.
    pub other_kernel_ns: u64,
    /// Kernel time whose frames have no names (the trace read without kernel symbols):
    /// not classified.
    pub unknown_kernel_ns: u64,
    /// Switch-ins of the item's thread, inside the item, on another CPU than the one it
    /// left (`None`: the trace has no context switches).
    pub migrations: Option<u64>,
}

impl Noise {
    /// Per-sample-kind accumulation for one item: `work` of `n` samples.
    pub(crate) fn add(&mut self, work: KernelWork<'_>, n: u64, interval_ns: f64) {
        let ns = (n as f64 * interval_ns).round() as u64;
        self.kernel_samples += n;
        match work {
            KernelWork::HardIrq => self.hardirq_ns += ns,
            KernelWork::SoftIrq => self.softirq_ns += ns,
            KernelWork::PageFault => self.page_fault_ns += ns,
            KernelWork::Other => self.other_kernel_ns += ns,
            KernelWork::Unknown => self.unknown_kernel_ns += ns,
            KernelWork::Syscall(name) => match self.syscalls.iter_mut().find(|s| s.name == name) {
                Some(s) => {
                    s.ns += ns;
                    s.samples += n;
                }
                None => self.syscalls.push(SyscallTime { name: name.to_owned(), ns, samples: n }),
            },
        }
    }

    pub(crate) fn sort(&mut self) {
        self.syscalls.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.name.cmp(&b.name)));
    }

    /// The kinds with time, as (`hardirq`|`softirq`|`page_fault`|`syscall:NAME`|
    /// `other_kernel`|`unknown_kernel`, ns).
    pub fn parts(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> =
            vec![("hardirq".into(), self.hardirq_ns), ("softirq".into(), self.softirq_ns), ("page_fault".into(), self.page_fault_ns)];
        v.extend(self.syscalls.iter().map(|s| (format!("syscall:{}", s.name), s.ns)));
        v.push(("other_kernel".into(), self.other_kernel_ns));
        v.push(("unknown_kernel".into(), self.unknown_kernel_ns));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irq_kinds_from_kernel_frames() {
        assert_eq!(irq_kind(&["futex_wake", "wake_up_q"], false), None);
        assert_eq!(irq_kind(&["asm_sysvec_apic_timer_interrupt", "hrtimer_interrupt", "hrtimer_wakeup"], false), Some(IrqKind::Timer));
        assert_eq!(irq_kind(&["common_interrupt", "blk_mq_complete_request", "bio_endio"], false), Some(IrqKind::Disk));
        assert_eq!(irq_kind(&["__do_softirq", "net_rx_action", "napi_poll"], false), Some(IrqKind::Network));
        assert_eq!(irq_kind(&[], true), Some(IrqKind::Other));
    }

    fn named<'a>(v: &[&'a str]) -> Vec<(&'a str, bool)> {
        v.iter().map(|&f| (f, true)).collect()
    }

    #[test]
    fn kernel_work_innermost_context_wins() {
        assert_eq!(kernel_work(&[], None), None);
        let getppid = named(&["entry_SYSCALL_64_after_hwframe", "do_syscall_64", "x64_sys_call", "__x64_sys_getppid", "__task_pid_nr_ns"]);
        assert_eq!(kernel_work(&getppid, None), Some(KernelWork::Syscall("getppid")));
        // A page fault while copying to user space in `read`: page-fault time.
        let fault_in_read = named(&[
            "entry_SYSCALL_64",
            "do_syscall_64",
            "__x64_sys_read",
            "ksys_read",
            "_copy_to_user",
            "asm_exc_page_fault",
            "exc_page_fault",
            "do_user_addr_fault",
            "handle_mm_fault",
            "clear_page_erms",
        ]);
        assert_eq!(kernel_work(&fault_in_read, None), Some(KernelWork::PageFault));
        let user_fault = named(&["asm_exc_page_fault", "exc_page_fault", "do_user_addr_fault", "handle_mm_fault", "clear_page_erms"]);
        assert_eq!(kernel_work(&user_fault, None), Some(KernelWork::PageFault));
        // An interrupt during a system call: interrupt time; its softirq: softirq time.
        let irq = named(&[
            "entry_SYSCALL_64",
            "do_syscall_64",
            "__x64_sys_write",
            "asm_common_interrupt",
            "common_interrupt",
            "handle_edge_irq",
            "virtblk_done",
        ]);
        assert_eq!(kernel_work(&irq, None), Some(KernelWork::HardIrq));
        let soft = named(&[
            "asm_sysvec_apic_timer_interrupt",
            "sysvec_apic_timer_interrupt",
            "irq_exit_rcu",
            "__irq_exit_rcu",
            "handle_softirqs",
            "net_rx_action",
        ]);
        assert_eq!(kernel_work(&soft, None), Some(KernelWork::SoftIrq));
        // The entry without the call's own function: a system call of unknown name.
        let entry_only = named(&["entry_SYSCALL_64", "do_syscall_64", "syscall_exit_to_user_mode"]);
        assert_eq!(kernel_work(&entry_only, None), Some(KernelWork::Syscall("?")));
        // ... named by glibc's wrapper of one call, not by a generic `syscall()`.
        assert_eq!(kernel_work(&entry_only, Some("__GI___libc_write")), Some(KernelWork::Syscall("write")));
        assert_eq!(kernel_work(&entry_only, Some("__read_nocancel")), Some(KernelWork::Syscall("?")));
        assert_eq!(kernel_work(&entry_only, Some("__libc_read")), Some(KernelWork::Syscall("read")));
        assert_eq!(kernel_work(&entry_only, Some("syscall")), Some(KernelWork::Syscall("?")));
        // ksys_ functions are named after their call.
        assert_eq!(
            kernel_work(&named(&["do_syscall_64", "x64_sys_call", "ksys_write", "vfs_write"]), None),
            Some(KernelWork::Syscall("write"))
        );
        assert_eq!(kernel_work(&named(&["ret_from_fork_asm", "kthread", "worker_thread"]), None), Some(KernelWork::Other));
    }

    #[test]
    fn kernel_work_without_kernel_symbols_is_unknown_not_guessed() {
        // No names: unknown, whatever the (placeholder) text says.
        let none = [("[kernel]", false), ("[kernel]", false)];
        assert_eq!(kernel_work(&none, None), Some(KernelWork::Unknown));
        // A placeholder that happens to look like a syscall function is not trusted.
        assert_eq!(kernel_work(&[("__x64_sys_write", false)], Some("__GI___libc_write")), Some(KernelWork::Unknown));
        // A named frame still says what it knows.
        assert_eq!(kernel_work(&[("[kernel]", false), ("exc_page_fault", true)], None), Some(KernelWork::PageFault));
    }

    #[test]
    fn noise_adds_time_per_kind_and_sorts_syscalls() {
        let mut n = Noise::default();
        n.add(KernelWork::Syscall("write"), 2, 1000.0);
        n.add(KernelWork::Syscall("getppid"), 5, 1000.0);
        n.add(KernelWork::Syscall("write"), 1, 1000.0);
        n.add(KernelWork::PageFault, 4, 1000.0);
        n.add(KernelWork::Unknown, 1, 1000.0);
        n.sort();
        assert_eq!(n.kernel_samples, 13);
        assert_eq!(n.page_fault_ns, 4000);
        assert_eq!(n.unknown_kernel_ns, 1000);
        let names: Vec<(&str, u64)> = n.syscalls.iter().map(|s| (s.name.as_str(), s.ns)).collect();
        assert_eq!(names, [("getppid", 5000), ("write", 3000)]);
    }
}
