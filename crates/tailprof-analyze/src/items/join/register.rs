//! Register mode: the item id is a register's value in each sample.

use tailprof_format::Sample;

use super::JoinState;
use crate::resolve::Resolver;

/// Register names in perf's x86-64 `sample_regs_user` bit order.
const X86_64_REGS: [&str; 24] = [
    "ax", "bx", "cx", "dx", "si", "di", "bp", "sp", "ip", "flags", "cs", "ss", "ds", "es", "fs", "gs", "r8", "r9", "r10", "r11", "r12",
    "r13", "r14", "r15",
];

/// perf's `sample_regs_user` bit of an x86-64 register name (`r13`, `rdi`, `di`, ...).
pub fn reg_bit(name: &str) -> Option<u32> {
    let n = name.trim().to_ascii_lowercase();
    let n = n.strip_prefix('%').unwrap_or(&n);
    if let Some(i) = X86_64_REGS.iter().position(|r| *r == n) {
        return Some(i as u32);
    }
    // rax, rdi, ... spell the 64-bit names of ax, di, ...; rip, rflags likewise.
    let short = n.strip_prefix('r')?;
    X86_64_REGS[..16].iter().position(|r| *r == short).map(|i| i as u32)
}

impl JoinState {
    #[inline]
    pub(super) fn register_sample(&mut self, s: &Sample, resolver: &mut Resolver) {
        let reg = self.reg.as_mut().expect("register mode");
        let v = s.regs.get(reg.index).copied().unwrap_or(0);
        if v == 0 {
            self.outside += 1;
            return;
        }
        let (item, live) = match reg.last {
            Some((p, id, item, live)) if p == s.pid && id == v => (item, live),
            _ => {
                let found = reg.items.get(&(s.pid, v)).copied();
                let (item, live) = match found {
                    Some(x) => x,
                    None => {
                        let item = self.new_item(s.pid, s.tid, v, 0, s.time);
                        let live = self.take_live();
                        let reg = self.reg.as_mut().expect("register mode");
                        reg.items.insert((s.pid, v), (item, live));
                        (item, live)
                    }
                };
                self.reg.as_mut().expect("register mode").last = Some((s.pid, v, item, live));
                (item, live)
            }
        };
        self.count(item, live, s, resolver);
    }
}

#[cfg(test)]
mod tests {
    use super::reg_bit;

    #[test]
    fn register_bits() {
        assert_eq!(reg_bit("r13"), Some(21));
        assert_eq!(reg_bit("R13"), Some(21));
        assert_eq!(reg_bit("rdi"), Some(5));
        assert_eq!(reg_bit("di"), Some(5));
        assert_eq!(reg_bit("rax"), Some(0));
        assert_eq!(reg_bit("r8"), Some(16));
        assert_eq!(reg_bit("xmm0"), None);
    }
}
