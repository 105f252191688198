const D=require('better-sqlite3'); const fs=require('fs'); const cp=require('child_process');
const dir='/tmp/dx/t'; 
try{cp.execSync('umount '+dir,{stdio:'ignore'})}catch{}
fs.mkdirSync(dir,{recursive:true}); cp.execSync(`mount -t tmpfs -o size=4m tmpfs ${dir}`);
const p=dir+'/m.db';
const ls=(t)=>{const s=fs.statfsSync(dir);console.log(t, fs.readdirSync(dir).map(f=>f+':'+fs.statSync(dir+'/'+f).size).join(' '),'free',s.bavail*s.bsize)};
let w=new D(p); w.pragma('journal_mode=WAL'); w.exec('create table t(x); insert into t values(1)'); 
const k=new D(p,{readonly:true}); k.prepare('select 1').get(); w.close(); k.close(); ls('kept');
try{cp.execSync(`dd if=/dev/zero of=${dir}/fill bs=4k`,{stdio:'ignore'})}catch{}; ls('filled');
function tryit(label, fn){try{console.log(label, 'OK', fn())}catch(e){console.log(label,'FAIL',e.code,e.message)}; ls('  after')}
tryit('ro read with pair', ()=>{const r=new D(p,{readonly:true}); const v=r.prepare('select count(*) c from t').get(); r.close(); return v});
tryit('rw read with pair', ()=>{const r=new D(p,{fileMustExist:true}); const v=r.prepare('select count(*) c from t').get(); r.close(); return v});
ls('x');
tryit('ro read with pair again', ()=>{const r=new D(p,{readonly:true}); const v=r.prepare('select count(*) c from t').get(); r.close(); return v});
fs.rmSync(p+'-shm'); 
tryit('ro read no shm', ()=>{const r=new D(p,{readonly:true}); const v=r.prepare('select count(*) c from t').get(); r.close(); return v});
fs.rmSync(p+'-shm',{force:true}); fs.rmSync(p+'-wal',{force:true});
tryit('ro read no pair', ()=>{const r=new D(p,{readonly:true}); const v=r.prepare('select count(*) c from t').get(); r.close(); return v});
fs.rmSync(p+'-shm',{force:true}); fs.rmSync(p+'-wal',{force:true});
tryit('ro excl no pair', ()=>{const r=new D(p,{readonly:true}); r.pragma('locking_mode=EXCLUSIVE'); const v=r.prepare('select count(*) c from t').get(); r.close(); return v});
fs.rmSync(p+'-shm',{force:true}); fs.rmSync(p+'-wal',{force:true});
tryit('rw excl no pair', ()=>{const r=new D(p,{fileMustExist:true}); r.pragma('locking_mode=EXCLUSIVE'); const v=r.prepare('select count(*) c from t').get(); r.close(); return v});
cp.execSync('umount '+dir);
