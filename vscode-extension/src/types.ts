// Shapes of what the language server returns; they mirror sage_engine/models/.

export interface Item {
    id: number;
    kind: 'experience' | 'rule';
    status: 'active' | 'resident' | 'quarantined' | 'merged' | 'deleted';
    title: string;
    content: string;
    code?: string | null;
    scope: string;
    operator?: string | null;
    family?: string | null;
    backend?: string | null;
    hardware?: string | null;
    tags: string[];
    utility: number;
    n_retrieved: number;
    n_adopted: number;
    n_credited: number;
    adoption_rate: number;
    operators_adopted: string[];
    source_episode?: number | null;
    source_attempt?: number | null;
    derived_from: number[];
    tokens: number;
    created_at: number;
    updated_at: number;
}

export interface ScoredItem {
    id: number;
    kind: 'experience' | 'rule';
    title: string;
    content: string;
    code?: string | null;
    tags: string[];
    utility: number;
    n_adopted: number;
    adoption_rate: number;
    similarity: number;
    exploration: number;
    score: number;
    rank: number;
}

export interface RetrievalResult {
    episode_id: number;
    resident_rules: ScoredItem[];
    items: ScoredItem[];
    filtered_out: Record<string, number>;
    tokens: number;
}

export interface TimingStats {
    median_ms: number;
    iqr_ms: number;
    reps: number;
}

export interface KernelTime {
    name: string;
    launches: number;
    time_us: number;
}

export type Bound = 'memory' | 'compute' | 'latency';

export interface SideProfile {
    kernels: KernelTime[];
    launches: number;
    kernel_us: number;
    wall_us: number;
    /** The same calls clocked without the profiler. */
    bare_us?: number | null;
    /** The profiler's own cost a call, already out of the kernel times. */
    overhead_us?: number | null;
    /** Kernel time a call over the timed median: within 0.9-1.1 they agree. */
    agreement?: number | null;
    /** By how much and why the kernel times differ from the timed median. */
    agreement_note?: string;
    achieved_gbps?: number | null;
    achieved_flops?: number | null;
    bandwidth_share?: number | null;
    compute_share?: number | null;
    bound?: Bound | null;
    note: string;
}

/** Where an evaluation's time goes (sage_engine/models/profile.py). */
export interface Profile {
    source: string;
    bytes?: number | null;
    flops?: number | null;
    reference?: SideProfile | null;
    candidate?: SideProfile | null;
    peak_gbps?: number | null;
    peak_flops?: number | null;
    bound?: Bound | null;
    summary: string;
    impossible?: string | null;
    own_kernels?: boolean | null;
    calibration?: string | null;
    notes: string[];
}

export interface EvalResult {
    status: string;
    message: string;
    task: string;
    backend: string;
    hardware: string;
    candidate_hash: string;
    correct: boolean;
    speedup?: number | null;
    /** False: the speedup is unverified (not credited); `speedup_note` says why. */
    speedup_trusted?: boolean | null;
    speedup_note?: string | null;
    max_abs_error?: number | null;
    attempt_id?: number | null;
    episode_id?: number | null;
    reference_timing?: TimingStats | null;
    candidate_timing?: TimingStats | null;
    profile?: Profile | null;
}

/** What `sage.benchmark` and `sage.lastResult` return. */
export interface ResultSummary {
    uri: string;
    task: string | null;
    summary: string;
    stale: boolean;
    /** An evaluation of the file runs (here, or in the server of a window before a reload) or waits for its turn. */
    running?: boolean;
    result: EvalResult | null;
}

export interface MemoryListing {
    rules: Item[];
    items: Item[];
}

export interface TaskChoice {
    id: string;
    name: string;
    operator: string;
    level: number;
}
