// The console's shared state: the admin key of this tab and what the views last read.

export const KEY_STORE = 'toolmark.adminKey';

export const state = {
  key: sessionStorage.getItem(KEY_STORE) ?? '',
  tenants: [], // as GET /admin/v1/tenants lists them
  stats: null, // the last GET /admin/v1/stats
  history: new Map(), // tenant id -> {conn: number[], cps: number[]}
  selected: null, // {tenant, etag} of the opened tenant
  poll: null,
  /** Called when the admin API refuses the key (signs the tab out). */
  onUnauthorized: null,
  polling: false,
  streams: new Map(), // name -> AbortController of a running event stream
  view: 'tenants',
};
