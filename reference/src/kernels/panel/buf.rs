//! The memory that holds panel values ([`PanelBuf`]): huge pages where the buffer is large
//! enough, else a `Vec`.

/// Panel values in memory of their own: an anonymous mapping whose whole 2 MiB pages Linux is
/// asked to back with huge pages (`madvise(MADV_HUGEPAGE)`, transparent huge pages). A forward
/// streams every weight from memory once; with 4 KiB pages each 4 KiB of it also costs a page
/// walk whose table entries come from memory too. (A `Vec` of this size would mostly reuse heap
/// pages already faulted in as 4 KiB ones, where the advice no longer applies.) Below one huge
/// page, or where the mapping cannot be made, a `Vec`.
pub(crate) struct PanelBuf<T> {
    mem: Mem<T>,
    len: usize,
}

enum Mem<T> {
    /// The mapping and the byte offset of value 0 in it (2 MiB-aligned).
    Map(memmap2::MmapMut, usize),
    Heap(Vec<T>),
}

const HUGE_PAGE: usize = 2 << 20;

impl<T: bytemuck::Pod> PanelBuf<T> {
    /// `len` zero values.
    pub(crate) fn zeroed(len: usize) -> Self {
        let bytes = len * std::mem::size_of::<T>();
        let map = if bytes >= HUGE_PAGE {
            memmap2::MmapMut::map_anon(bytes + HUGE_PAGE).ok()
        } else {
            None
        };
        let mem = match map {
            Some(map) => {
                let offset =
                    (map.as_ptr() as usize).next_multiple_of(HUGE_PAGE) - map.as_ptr() as usize;
                #[cfg(unix)]
                if std::env::var("GLM5V_CPU_HUGE_PAGES").as_deref() != Ok("0") {
                    // whole huge pages only: a partly used one would add up to 2 MiB of
                    // resident zeros per weight. Advice only: where it is refused the pages
                    // stay 4 KiB.
                    let whole = bytes / HUGE_PAGE * HUGE_PAGE;
                    let _ = map.advise_range(memmap2::Advice::HugePage, offset, whole);
                }
                Mem::Map(map, offset)
            }
            None => Mem::Heap(vec![T::zeroed(); len]),
        };
        Self { mem, len }
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        match &self.mem {
            Mem::Map(map, off) => {
                bytemuck::cast_slice(&map[*off..*off + self.len * std::mem::size_of::<T>()])
            }
            Mem::Heap(v) => v,
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        let len = self.len;
        match &mut self.mem {
            Mem::Map(map, off) => {
                bytemuck::cast_slice_mut(&mut map[*off..*off + len * std::mem::size_of::<T>()])
            }
            Mem::Heap(v) => v,
        }
    }
}

impl<T: bytemuck::Pod> Clone for PanelBuf<T> {
    fn clone(&self) -> Self {
        let mut c = Self::zeroed(self.len);
        c.as_mut_slice().copy_from_slice(self.as_slice());
        c
    }
}

impl<T> std::fmt::Debug for PanelBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.mem {
            Mem::Map(..) => "mapped",
            Mem::Heap(_) => "heap",
        };
        write!(f, "PanelBuf({} values, {kind})", self.len)
    }
}
